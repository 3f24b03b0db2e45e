package watch

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/netready/netready/pkg/pool"
)

// goneNetwork is a network whose entry left the config folder at since.
type goneNetwork struct {
	pool.Network
	since time.Time
}

// loadNetworks reads the config folder. A folder that cannot be read says
// nothing about the pools: the last networks stay, and so does any taint.
func (w *Watcher) loadNetworks() {
	nets, problems, err := pool.AllNetworks(w.confDir)
	switch {
	case err != nil:
		w.note(err)
		w.netsUnsure = true
		return
	case problems != nil:
		w.note(problems)
	default:
		w.note(nil)
	}
	now := w.now()
	for _, old := range w.nets {
		if _, held := w.gone[old.Network]; !held && !slices.ContainsFunc(nets, func(n pool.Network) bool { return n.Network == old.Network }) {
			w.gone[old.Network] = goneNetwork{Network: old, since: now}
			w.log.Warn("a network's netready entry left the CNI config; still counting its pool for a while", "network", old.Network, "for", w.forgetAfter)
		}
	}
	for _, n := range nets {
		delete(w.gone, n.Network)
	}
	w.pluginDirs = w.pluginDirs[:0]
	if entries, err := os.ReadDir(w.confDir); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				w.pluginDirs = append(w.pluginDirs, filepath.Join(w.confDir, e.Name()))
			}
		}
	}
	w.nets, w.netsUnsure, w.loaded = nets, problems != nil, true
	w.noteStatusActive()
}

// addWatches adds an inotify watch on the config folder, its plugin
// folders, and each network's allocation folder (or, before host-local
// made it, its parent). A folder that does not exist yet is added at a
// later read: its parent's event or the resync. One that was removed
// drops out of WatchList.
func (w *Watcher) addWatches(fsw *fsnotify.Watcher, nets []pool.Network) {
	want := map[string]bool{filepath.Clean(w.confDir): true}
	for _, d := range w.pluginDirs {
		want[d] = true
	}
	for _, n := range nets {
		if n.Origin() != pool.Folder {
			continue // an agent's pool: read, not watched
		}
		want[n.Dir] = true
		want[filepath.Dir(n.Dir)] = true
	}
	have := map[string]bool{}
	for _, dir := range fsw.WatchList() {
		have[dir] = true
		if !want[dir] {
			_ = fsw.Remove(dir) // gone already, most likely
		}
	}
	for dir := range want {
		if !have[dir] {
			// A folder that does not exist yet is watched through its
			// parent; the next full round adds it.
			_ = fsw.Add(dir)
		}
	}
}

// note logs a problem of the config folder once, and its end.
func (w *Watcher) note(err error) {
	s := ""
	if err != nil {
		s = err.Error()
	}
	if s == w.noted {
		return
	}
	w.noted = s
	if err != nil {
		w.log.Warn("CNI config: the taint will not be lifted until this is fixed", "confDir", w.confDir, "err", strings.ReplaceAll(s, "\n", "; "))
	} else {
		w.log.Info("CNI config readable, every entry valid", "confDir", w.confDir)
	}
}
