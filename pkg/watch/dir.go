package watch

import (
	"context"
	"fmt"

	"github.com/fsnotify/fsnotify"
)

// openDir watches one folder with inotify. A folder that does not exist yet
// is not watchable; the caller falls back to its safety re-check.
func openDir(ctx context.Context, dir string) (<-chan Wake, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, err
	}
	out := make(chan Wake, 1)
	go func() {
		defer close(out)
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				send(out, Wake{})
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
