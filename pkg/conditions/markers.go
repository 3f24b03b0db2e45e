package conditions

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/nodewriter"
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
			continue // the sidecar's own (statedir.PodMemories): no network is named so
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
	for _, path := range c.state.known() {
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
// that is gone is dropped, and its pod queued so that its condition is
// computed again. One that exists but cannot be read stays indexed as it
// was, keeps its pod not ready, and is read again every unreadableRetry.
func (c *Controller) onMarker(path string) {
	m, err := c.read(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if ref, known, stray := c.state.markerGone(path); known {
			c.queue.Add(ref.podKey)
		} else if stray {
			c.queueUnjudged()
		}
		return
	case err != nil:
		c.note(path, "unreadable marker; its pod is kept not ready while it stays so, retrying", "err", err)
		if ref, ok := c.state.markerUnreadable(path, err); ok {
			c.queue.Add(ref.podKey)
		} else {
			c.queueUnjudged()
		}
		return
	}
	c.countADD(path, m)
	c.noteWorked(path, m)
	if m.Pod.Name == "" || m.Pod.Namespace == "" || m.Pod.UID == "" {
		if c.state.markerReadable(path) {
			c.queueUnjudged()
		}
		c.note(path, "marker names no Kubernetes pod; nothing to publish")
		return
	}
	ref := markerRef{podKey: m.Pod.Namespace + "/" + m.Pod.Name, uid: types.UID(m.Pod.UID)}
	if c.state.markerRead(path, ref) {
		defer c.queueUnjudged()
	}
	c.queue.Add(ref.podKey)
}

// markerFile is one marker file of a pod as read this round.
type markerFile struct {
	Path string
	// Marker is what it says, or nil when Err says why it cannot be read.
	Marker *marker.Marker
	Err    error
	// Progress is its re-check's latest, if one runs for this marker.
	Progress *marker.Marker
}

// readPod reads the pod's marker files, with their re-checks' progress.
// Files that are gone are left out: their event, or the next scan,
// forgets them.
func (c *Controller) readPod(pod *corev1.Pod) []markerFile {
	var out []markerFile
	for _, path := range c.state.paths(pod.UID) {
		m, err := c.read(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			c.state.markerUnreadable(path, err)
			out = append(out, markerFile{Path: path, Err: err})
			continue
		}
		c.state.markerReadable(path)
		c.observeWait(path, m)
		f := markerFile{Path: path, Marker: m}
		if m.State == marker.StatePending {
			f.Progress = c.state.latest(path, m.CreatedAt.Time)
		}
		out = append(out, f)
	}
	return out
}

// actions are what judging a pod asks of the controller, which judging
// itself never does.
type actions struct {
	// Recheck: go on with these pending markers' checks (started once
	// per marker); StopRecheck: these markers are pending no more.
	Recheck     []markerFile
	StopRecheck []string
	// Presets: the markers as last checked, for the Node's warnings.
	Presets []nodewriter.Preset
}

// viewOf is, purely, what the pod's marker files as read tell: the view
// judge reads, what to do, and the basis (the files as they are on disk,
// not the re-checks' progress). started is when this sidecar started;
// worked reports the networks netready worked for on this node.
func viewOf(files []markerFile, started time.Time, worked func(network string) bool) (podView, actions, string) {
	var v podView
	var a actions
	v.NeverWrote = map[*marker.Marker]string{}
	var basis strings.Builder
	for _, f := range files {
		if f.Marker == nil {
			v.Unreadable = append(v.Unreadable, publish.Unreadable{Path: f.Path, Err: f.Err})
			fmt.Fprintf(&basis, "%s unreadable: %v\n", f.Path, f.Err)
			continue
		}
		m := f.Marker
		fmt.Fprintf(&basis, "%s %s %d\n", f.Path, m.State, m.CreatedAt.UnixNano())
		// The ADD's own checks are fresh if it ran while this sidecar did.
		fresh := m.CreatedAt.After(started)
		if m.State == marker.StatePending {
			a.Recheck = append(a.Recheck, f)
			if f.Progress != nil {
				m, fresh = f.Progress, true
			}
		} else {
			a.StopRecheck = append(a.StopRecheck, f.Path)
		}
		a.Presets = append(a.Presets, nodewriter.Preset{Network: m.Network, Why: presetNotWriting(m), Ready: m.State == marker.StateReady})
		if why := neverWrote(m, fresh, worked); why != "" {
			v.NeverWrote[m] = why
		}
		v.Markers = append(v.Markers, m)
	}
	return v, a, basis.String()
}

// do carries out what judging a pod asked.
func (c *Controller) do(a actions) {
	for _, f := range a.Recheck {
		c.startCheck(f.Path, f.Marker)
	}
	for _, path := range a.StopRecheck {
		c.state.recheckStopped(path)
	}
	for _, p := range a.Presets {
		c.warnings.PresetSeen(p, c.state.hasWorked(p.Network))
	}
}

// noteRecreated logs, once, markers that name this pod's name but an older
// UID: they are never published on the new pod.
func (c *Controller) noteRecreated(pod *corev1.Pod) {
	key := pod.Namespace + "/" + pod.Name
	for _, path := range c.state.ofOtherUID(key, pod.UID) {
		c.note(path, "the pod was recreated; this marker is for the old one, not publishing", "pod", key, "podUID", pod.UID)
	}
}
