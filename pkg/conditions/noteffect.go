package conditions

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/marker"
)

// WorkedFile is, in a network's marker folder, the sidecar's record that
// a marker of the network was ready on this node: its preset's agent
// has written what the preset waits for here at least once. It outlives
// a sidecar restart, and the pods whose ready markers told (their DEL
// removes those), as long as the state folder lasts (a reboot clears
// /run). Like the plugin's and the installer's notes it starts with a
// dot, so that neither GC nor the marker scan takes it for a marker.
const WorkedFile = ".worked"

// workedNetworks are the networks netready has worked for on this node
// (WorkedFile). A pending marker of such a network that says its preset's
// agent is not set up is a blip of an agent that works (a restart that
// took its folder away), not a node where netready is not in effect: it
// is never given up on. Its lock guards only its map.
type workedNetworks struct {
	mu sync.Mutex
	// recorded: network -> whether WorkedFile is written.
	recorded map[string]bool
}

func newWorkedNetworks() *workedNetworks { return &workedNetworks{recorded: map[string]bool{}} }

// has reports whether netready has worked for network on this node.
func (w *workedNetworks) has(network string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.recorded[network]
	return ok
}

// set records that network worked, and reports whether its file still
// needs writing.
func (w *workedNetworks) set(network string, written bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.recorded[network] {
		return false
	}
	w.recorded[network] = written
	return !written
}

// readWorked learns, from a network folder's WorkedFile, that netready
// worked for it before this sidecar started. The main loop alone calls
// it.
func (c *Controller) readWorked(dir string) {
	_, err := os.Stat(filepath.Join(dir, WorkedFile))
	switch {
	case err == nil:
		c.worked.set(filepath.Base(dir), true)
	case !errors.Is(err, fs.ErrNotExist):
		// Unreadable: as a worked network, never given up on.
		c.note(dir, "cannot read whether the network worked on this node; taking it that it did", "err", err)
		c.worked.set(filepath.Base(dir), true)
	}
}

// noteWorked records that m's network worked on this node, once m is
// ready. A file that cannot be written is tried again with the next ready
// marker; meanwhile the sidecar remembers it.
func (c *Controller) noteWorked(path string, m *marker.Marker) {
	if m.State != marker.StateReady || !c.worked.set(m.Network, false) {
		return
	}
	file := filepath.Join(filepath.Dir(path), WorkedFile)
	if err := atomicfile.Write(file, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		c.log.Warn("cannot record that the network worked on this node; a restarted sidecar may give up on its pods that wait for a preset whose agent is not set up", "file", file, "err", err)
		return
	}
	c.worked.set(m.Network, true)
}

// neverWrote returns, for a pending marker whose checks say that its
// preset's agent is not set up to write (presetPrefixes) on a network that
// never worked on this node, why; else "". fresh says the checks are this
// sidecar's own or the ADD's, written while the sidecar ran: a marker
// read back after a restart may tell of a folder that is there by now.
func (c *Controller) neverWrote(m *marker.Marker, fresh bool) string {
	if !fresh || m.State != marker.StatePending || c.worked.has(m.Network) {
		return ""
	}
	return presetNotWriting(m)
}
