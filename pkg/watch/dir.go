package watch

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// openDir watches one folder with inotify. A folder that does not exist yet
// is not watchable; the caller falls back to its safety re-check. With a
// name, only events of that entry, or of the folder itself, wake: a status
// folder holds a file per pod, and in a storm every waiting ADD would
// otherwise probe on every other pod's file.
func openDir(ctx context.Context, dir, name string) (<-chan Wake, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, err
	}
	// fsnotify names an event by the folder as added, cleaned, and the
	// entry.
	dir = filepath.Clean(dir)
	entry := filepath.Join(dir, name)
	out := make(chan Wake, 1)
	go func() {
		defer close(out)
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if name == "" || ev.Name == entry || ev.Name == dir {
					send(out, Wake{})
				}
			case _, ok := <-w.Errors:
				// An overflow lost events: wake so that checks re-probe.
				send(out, Wake{})
				if !ok {
					return
				}
			}
		}
	}()
	return out, nil
}
