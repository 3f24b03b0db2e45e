package install

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/netready/netready/pkg/conflist"
	"github.com/netready/netready/pkg/notes"
)

// An agent that rewrites its conflist whenever it differs from its own
// (Cilium with cni.exclusive) would fight the installer forever: each
// puts its version back within a second. After fightLimit reverts within
// fightWindow the installer stops putting the entry back for a while,
// doubling from backoffMin to backoffMax, and says so: in its log, and in
// a note the sidecar raises as a Node Event and metric and that keeps
// pods netready did not see from passing their gate meanwhile.
const (
	revertWarnAfter = 3
	revertWindow    = time.Minute
	fightLimit      = 5
	fightWindow     = 5 * time.Minute
	backoffMin      = time.Minute
	backoffMax      = 30 * time.Minute
)

// fight is the installer's record of reverts and its backoff.
type fight struct {
	reverts []time.Time
	backoff time.Duration // the last pause; 0 before the first
	until   time.Time     // no entry is put back before then
	file    string        // the file fought over
	// note is the sidecar's note of the backoff, while one is written.
	note   struct{ stateDir, network string }
	logged bool // the pause was logged
}

// noteRevert records that the entry this process had written was gone
// from path, and backs off once another agent keeps removing it, instead
// of putting it back; it reports whether it backed off. After a backoff,
// one revert is enough to back off again, for twice as long.
func (in *installer) noteRevert(path string) bool {
	now := in.now()
	f := &in.fight
	f.reverts = append(f.reverts, now)
	for len(f.reverts) > 0 && now.Sub(f.reverts[0]) > fightWindow {
		f.reverts = f.reverts[1:]
	}
	recent := 0
	for _, t := range f.reverts {
		if now.Sub(t) <= revertWindow {
			recent++
		}
	}
	if len(f.reverts) >= fightLimit || (f.backoff > 0 && f.note.network != "") {
		in.backOff(path, len(f.reverts), now)
		return true
	}
	in.log.Info("the entry was gone; putting it back", "file", path)
	if recent >= revertWarnAfter {
		in.log.Warn("another agent keeps removing netready from the CNI config; configure it to keep chained plugins, or use --mode plugin-dir",
			"file", path, "reverts", recent, "within", revertWindow)
	}
	return false
}

// holdsEntry reports whether f's chain ends with entry, its only netready
// entry, however the file is indented.
func holdsEntry(f *conflist.File, entry json.RawMessage) bool {
	if len(f.Plugins) == 0 || !bytes.Equal(compact(f.Plugins[len(f.Plugins)-1]), compact(entry)) {
		return false
	}
	g := *f
	g.Plugins = f.Plugins[:len(f.Plugins)-1]
	return !g.HasEntry()
}

func compact(raw []byte) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// backOff stops putting the entry back for the next pause.
func (in *installer) backOff(path string, reverts int, now time.Time) {
	f := &in.fight
	f.backoff = min(max(2*f.backoff, backoffMin), backoffMax)
	f.until, f.file, f.reverts, f.logged = now.Add(f.backoff), path, nil, false
	// After the pause the entry is put back once, as new: only the
	// agent's removal of that is a revert, which backs off again.
	delete(in.written, path)
	msg := fmt.Sprintf("another agent removed netready from %s %d times within %s: netready-install stops putting it back for %s, so that the two do not fight; pods started meanwhile skip netready and are kept not ready by the sidecar. Configure that agent to keep chained plugins (Cilium: cni.exclusive=false), or use --mode plugin-dir where the runtime supports it",
		path, reverts, fightWindow, f.backoff)
	in.log.Error(msg)
	if f.note.network == "" {
		f.note.stateDir, f.note.network = in.lastStateDir, in.lastNetwork
	}
	if err := notes.NoteInstallBackoff(f.note.stateDir, f.note.network, msg); err != nil {
		in.log.Warn("cannot leave the note of the backoff for the sidecar", "err", err)
	}
}

// backingOff reports whether the installer is pausing now.
func (in *installer) backingOff() bool {
	f := &in.fight
	if !in.now().Before(f.until) {
		return false
	}
	if !f.logged {
		in.log.Info("backing off: not putting the entry back", "file", f.file, "until", f.until.Format(time.RFC3339))
		f.logged = true
	}
	return true
}

// settled runs once the entry is in place; wrote says this call put it
// there. The sidecar's note of a backoff says the entry stays out, so it
// goes as soon as no pause holds it out: this process's own note once the
// entry is seen to stay after the pause (the agent's next removal backs
// off again), a note left by an earlier process at once. That process may
// have been restarted after its agent was told to keep chained plugins,
// or replaced by one in --mode plugin-dir; either way no one pauses now.
func (in *installer) settled(wrote bool) {
	f := &in.fight
	if in.now().Before(f.until) {
		return
	}
	stateDir, network := in.lastStateDir, in.lastNetwork
	own := f.note.network != ""
	if own {
		if wrote {
			return
		}
		stateDir, network = f.note.stateDir, f.note.network
	} else if _, err := os.Stat(filepath.Join(stateDir, network, notes.InstallBackoffFile)); stateDir == "" || err != nil {
		return
	}
	if err := notes.ClearInstallBackoff(stateDir, network); err != nil {
		in.log.Warn("cannot clear the note of the backoff", "err", err)
		return
	}
	if own {
		in.log.Info("the entry stays in place again; the backoff is over", "file", f.file)
		f.note.network = ""
		return
	}
	in.log.Info("cleared the note of an earlier installer's backoff: this one keeps the entry in place", "network", network,
		"note", filepath.Join(stateDir, network, notes.InstallBackoffFile))
}
