// Package notes owns the small files that the plugin and the installer
// leave in a network's marker folder for the sidecar to raise, as a Node
// Event and a metric, what neither can report through the API itself: an
// entry that ADD refuses (STATUS stays green for it), and the installer's
// backoff from an agent that keeps removing the entry. Names start with a
// dot and end in no marker suffix, so neither GC nor the sidecar's marker
// scan takes them for markers.
package notes

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/statedir"
)

// InvalidConfigFile is, in a network's marker folder, the message of the
// last netready entry that ADD or STATUS refused. STATUS stays green for
// netready's own configuration (a typo must not take the node NotReady),
// so the sidecar reports it from this file instead, as a Node Event and
// a metric. It is removed once an entry parses again.
const InvalidConfigFile = statedir.InvalidConfig

// notePath is the note file name of network, or "" when the network's
// name or the state folder cannot make a safe path.
func notePath(stateDir, network, name string) string {
	if stateDir == "" || !filepath.IsAbs(stateDir) {
		return ""
	}
	if (marker.Key{Network: network, ContainerID: "x", IfName: "x"}).Validate() != nil {
		return ""
	}
	return filepath.Join(stateDir, network, name)
}

// NoteInvalidConfig records msg for the sidecar, if it is not recorded
// already.
func NoteInvalidConfig(stateDir, network, msg string) error {
	return writeNote(stateDir, network, InvalidConfigFile, msg)
}

// writeNote writes a note for the sidecar, if it does not hold msg
// already.
func writeNote(stateDir, network, name, msg string) error {
	path := notePath(stateDir, network, name)
	if path == "" {
		return nil
	}
	data := []byte(msg + "\n")
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o644)
}

// ClearInvalidConfig removes the record of a refused entry.
func ClearInvalidConfig(stateDir, network string) error {
	return removeNote(stateDir, network, InvalidConfigFile)
}

// removeNote removes a note; a missing one is no error.
func removeNote(stateDir, network, name string) error {
	path := notePath(stateDir, network, name)
	if path == "" {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// InstallBackoffFile is, in a network's marker folder, the installer's
// message while it has stopped putting netready's entry back because
// another agent keeps removing it. Pods started meanwhile skip netready;
// the sidecar keeps those it did not see from passing their gate, and
// raises the message as a Node Event and a metric.
const InstallBackoffFile = statedir.InstallBackoff

// NoteInstallBackoff records the installer's backoff for the sidecar.
func NoteInstallBackoff(stateDir, network, msg string) error {
	return writeNote(stateDir, network, InstallBackoffFile, msg)
}

// ClearInstallBackoff removes the note of the installer's backoff.
func ClearInstallBackoff(stateDir, network string) error {
	return removeNote(stateDir, network, InstallBackoffFile)
}
