package conditions

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/notes"
	"github.com/netready/netready/pkg/statedir"
)

// WorkedFile is, in a network's marker folder, the sidecar's record that
// a marker of the network was ready on this node: its preset's agent
// has written what the preset waits for here at least once. It outlives
// a sidecar restart, and the pods whose ready markers told (their DEL
// removes those), as long as the state folder lasts. A pending marker of
// such a network that says its preset's agent is not set up is a blip of
// an agent that works (a restart that took its folder away), not a node
// where netready is not in effect: it is never given up on.
const WorkedFile = statedir.Worked

// readWorked learns, from a network folder's WorkedFile, that netready
// worked for it before this sidecar started. The main loop alone calls
// it.
func (c *Controller) readWorked(dir string) {
	_, err := os.Stat(filepath.Join(dir, WorkedFile))
	switch {
	case err == nil:
		c.state.networkWorked(filepath.Base(dir), true)
	case !errors.Is(err, fs.ErrNotExist):
		// Unreadable: as a worked network, never given up on.
		c.note(dir, "cannot read whether the network worked on this node; taking it that it did", "err", err)
		c.state.networkWorked(filepath.Base(dir), true)
	}
}

// noteWorked records that m's network worked on this node, once m is
// ready. A file that cannot be written is tried again with the next ready
// marker; meanwhile the sidecar remembers it.
func (c *Controller) noteWorked(path string, m *marker.Marker) {
	if m.State != marker.StateReady || !c.state.networkWorked(m.Network, false) {
		return
	}
	file := filepath.Join(filepath.Dir(path), WorkedFile)
	if err := atomicfile.Write(file, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		c.log.Warn("cannot record that the network worked on this node; a restarted sidecar may give up on its pods that wait for a preset whose agent is not set up", "file", file, "err", err)
		return
	}
	c.state.networkWorked(m.Network, true)
}

// neverWrote returns, for a pending marker whose checks say that its
// preset's agent is not set up to write (presetPrefixes) on a network that
// never worked on this node (worked), why; else "". fresh says the checks
// are this sidecar's own or the ADD's, written while the sidecar ran: a
// marker read back after a restart may tell of a folder that is there by
// now.
func neverWrote(m *marker.Marker, fresh bool, worked func(network string) bool) string {
	if !fresh || m.State != marker.StatePending || worked(m.Network) {
		return ""
	}
	return presetNotWriting(m)
}

// presetPrefixes start the reasons checks give when a preset's agent is
// not set up to write at all (checks.CalicoNotWriting).
var presetPrefixes = []string{"calico preset: "}

// presetNotWriting returns why m's checks say its preset's agent is not
// set up to write what it waits for, or "".
func presetNotWriting(m *marker.Marker) string {
	why := ""
	for _, ch := range m.Checks {
		for _, p := range presetPrefixes {
			if !ch.Ready && strings.HasPrefix(ch.Why, p) {
				why = ch.Why
			}
		}
	}
	return why
}

// readNotes follows a network folder's notes (package notes) into the
// Node's warnings. The main loop alone calls it.
func (c *Controller) readNotes(dir string) {
	network := filepath.Base(dir)
	for _, file := range nodewriter.NoteFiles {
		path := filepath.Join(dir, file)
		msg, written := "", time.Time{}
		if data, err := os.ReadFile(path); err == nil {
			msg = strings.TrimSpace(string(data))
			if info, err := os.Stat(path); err == nil {
				written = info.ModTime()
			}
		}
		if c.warnings.NoteRead(network, file, msg, written) && file == notes.InstallBackoffFile {
			// Pods judged NotObserved while it stood, or after, change.
			c.queueUnjudged()
		}
	}
}
