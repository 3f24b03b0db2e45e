package status

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/marker"
)

// InvalidConfigFile is, in a network's marker folder, the message of the
// last netready entry that ADD or STATUS refused. STATUS stays green for
// netready's own configuration (a typo must not take the node NotReady),
// so the sidecar reports it from this file instead, as a Node Event and
// a metric. It is removed once an entry parses again.
const InvalidConfigFile = ".config-invalid"

// invalidConfigPath is the file for network, or "" when the network's
// name or the state folder cannot make a safe path.
func invalidConfigPath(stateDir, network string) string {
	if stateDir == "" || !filepath.IsAbs(stateDir) {
		return ""
	}
	if (marker.Key{Network: network, ContainerID: "x", IfName: "x"}).Validate() != nil {
		return ""
	}
	return filepath.Join(stateDir, network, InvalidConfigFile)
}

// NoteInvalidConfig records msg for the sidecar, if it is not recorded
// already.
func NoteInvalidConfig(stateDir, network, msg string) error {
	path := invalidConfigPath(stateDir, network)
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
	path := invalidConfigPath(stateDir, network)
	if path == "" {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
