package conditions

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/notes"
	"github.com/netready/netready/pkg/outcome"
	"github.com/netready/netready/pkg/publish"
)

// scan watches every network folder and reads every marker. Markers it
// knows of that a folder read no longer shows (removed while inotify
// events were lost) are read again, which forgets them.
func (c *Controller) scan(w *fsnotify.Watcher) {
	nets, err := os.ReadDir(c.opts.StateDir)
	if err != nil {
		c.log.Warn("read state dir", "err", err)
		return
	}
	seen, listed := map[string]bool{}, map[string]bool{}
	for _, n := range nets {
		if !n.IsDir() || strings.HasPrefix(n.Name(), ".") {
			continue // the sidecar's own (MemoryDir): no network is named so
		}
		dir := filepath.Join(c.opts.StateDir, n.Name())
		if err := w.Add(dir); err != nil {
			// Its markers are still read by every resync.
			c.note(dir, "cannot watch a network folder; reading it at each resync", "err", err)
		}
		files, err := os.ReadDir(dir)
		if err != nil {
			c.log.Warn("read network folder", "dir", dir, "err", err)
			continue
		}
		listed[dir] = true
		c.readJournal(dir)
		c.readNotes(dir)
		c.readWorked(dir)
		for _, f := range files {
			if isMarker(f.Name()) {
				path := filepath.Join(dir, f.Name())
				seen[path] = true
				c.onMarker(path)
			}
		}
	}
	c.scanned = true
	for _, path := range c.index.known() {
		if !seen[path] && (listed[filepath.Dir(path)] || !slices.ContainsFunc(nets, func(e os.DirEntry) bool {
			return filepath.Join(c.opts.StateDir, e.Name()) == filepath.Dir(path)
		})) {
			c.onMarker(path)
		}
	}
}

func isMarker(name string) bool {
	return strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, ".")
}

func (c *Controller) onEvent(w *fsnotify.Watcher, ev fsnotify.Event) {
	if filepath.Dir(ev.Name) == filepath.Clean(c.opts.StateDir) {
		if info, err := os.Stat(ev.Name); err == nil && info.IsDir() && !strings.HasPrefix(info.Name(), ".") {
			c.scan(w) // a new network folder
		}
		return
	}
	switch base := filepath.Base(ev.Name); {
	case isMarker(base):
		c.onMarker(ev.Name)
	case base == outcome.FileName:
		c.readJournal(filepath.Dir(ev.Name))
	case base == notes.InvalidConfigFile || base == notes.InstallBackoffFile:
		c.readNotes(filepath.Dir(ev.Name))
	}
}

// onMarker indexes a marker by its pod's UID and queues the pod. A marker
// that is gone is dropped from the index, and its pod queued so that its
// condition is computed again. One that exists but cannot be read stays
// indexed as it was, keeps its pod not ready, and is read again every
// unreadableRetry.
func (c *Controller) onMarker(path string) {
	m, err := c.read(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		stray := c.index.readable(path)
		if ref, ok := c.forget(path); ok {
			c.queue.Add(ref.podKey)
		} else if stray {
			c.queueUnjudged()
		}
		return
	case err != nil:
		c.note(path, "unreadable marker; its pod is kept not ready while it stays so, retrying", "err", err)
		if ref, ok := c.index.setUnreadable(path, err); ok {
			c.queue.Add(ref.podKey)
		} else {
			c.queueUnjudged()
		}
		return
	}
	if c.index.readable(path) {
		defer c.queueUnjudged()
	}
	c.countADD(path, m)
	c.noteWorked(path, m)
	if m.Pod.Name == "" || m.Pod.Namespace == "" || m.Pod.UID == "" {
		c.note(path, "marker names no Kubernetes pod; nothing to publish")
		return
	}
	ref := markerRef{podKey: m.Pod.Namespace + "/" + m.Pod.Name, uid: types.UID(m.Pod.UID)}
	c.index.add(path, ref)
	c.queue.Add(ref.podKey)
}

// podMarkers reads the pod's markers, starting re-checks for the pending
// ones and showing their latest progress. Markers that exist but cannot be
// read come back apart, and are retried.
func (c *Controller) podMarkers(pod *corev1.Pod) ([]*marker.Marker, []publish.Unreadable, map[*marker.Marker]string, string) {
	var out []*marker.Marker
	neverWrote := map[*marker.Marker]string{}
	var bad []publish.Unreadable
	var basis strings.Builder
	for _, path := range c.index.paths(pod.UID) {
		m, err := c.read(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // its event, or the next scan, forgets it
		case err != nil:
			c.index.setUnreadable(path, err)
			bad = append(bad, publish.Unreadable{Path: path, Err: err})
			fmt.Fprintf(&basis, "%s unreadable: %v\n", path, err)
			continue
		}
		fmt.Fprintf(&basis, "%s %s %d\n", path, m.State, m.CreatedAt.UnixNano())
		c.index.readable(path)
		c.observeWait(path, m)
		// The ADD's own checks are fresh if it ran while this sidecar did.
		fresh := m.CreatedAt.After(c.started)
		if m.State == marker.StatePending {
			c.startCheck(path, m)
			if p := c.rechecks.latest(path, m.CreatedAt.Time); p != nil {
				m, fresh = p, true
			}
		} else {
			c.rechecks.stop(path)
		}
		c.notePresets(m)
		if why := c.neverWrote(m, fresh); why != "" {
			neverWrote[m] = why
		}
		out = append(out, m)
	}
	return out, bad, neverWrote, basis.String()
}

// noteRecreated logs, once, markers that name this pod's name but an older
// UID: they are never published on the new pod.
func (c *Controller) noteRecreated(pod *corev1.Pod) {
	key := pod.Namespace + "/" + pod.Name
	for _, path := range c.index.ofOtherUID(key, pod.UID) {
		c.note(path, "the pod was recreated; this marker is for the old one, not publishing", "pod", key, "podUID", pod.UID)
	}
}

// forget drops what is known of a removed marker, and returns what it
// named. Its re-check stops in one step with the unindexing: startCheck
// then sees the path gone and starts nothing.
func (c *Controller) forget(path string) (markerRef, bool) {
	ref, ok := c.index.forget(path, func() { c.rechecks.stop(path) })
	c.logs.forget(path)
	return ref, ok
}
