package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/types"
)

// Cleanup is what DEL and GC read from the entry. Removing markers must
// work whatever else is wrong with the entry: a failing DEL stops the
// runtime from running the main plugin's DEL, which leaks IPs and veths.
type Cleanup struct {
	// Name is the network; empty when the entry has no usable name.
	Name string
	// StateDir is where markers live; empty when the entry's value is
	// unusable, in which case ADD never wrote a marker with it either.
	StateDir string
	LogFile  string
	// ValidAttachments is GC's keep-list.
	ValidAttachments []types.GCAttachment
	// KeepListGiven is set when the entry holds an explicit keep-list,
	// even an empty one. A missing or null "cni.dev/valid-attachments"
	// says nothing about which attachments live, so GC removes nothing.
	KeepListGiven bool
	// KeepListErr is set when the keep-list cannot be read; GC must then
	// remove nothing.
	KeepListErr error
}

// ParseCleanup reads name, stateDir, logFile and the GC keep-list. It
// never fails: every other problem of the entry, as ADD would report it,
// comes back as problems, for the log.
func ParseCleanup(stdin []byte) (c *Cleanup, problems error) {
	if _, err := Parse(stdin); err != nil {
		problems = err
	}
	return ReadCleanup(stdin), problems
}

// ReadCleanup reads name, stateDir, logFile and the GC keep-list, whatever
// else the entry holds; for a caller that has validated the entry already.
func ReadCleanup(stdin []byte) *Cleanup {
	c := &Cleanup{StateDir: DefaultStateDir}
	var top map[string]json.RawMessage
	if json.Unmarshal(stdin, &top) != nil {
		c.StateDir = ""
		c.KeepListErr = fmt.Errorf("the configuration is not a JSON object")
		return c
	}
	_ = json.Unmarshal(top["name"], &c.Name) // no usable name: DEL and GC do nothing
	if raw, ok := top["stateDir"]; ok {
		var dir string
		if json.Unmarshal(raw, &dir) != nil || (dir != "" && !filepath.IsAbs(dir)) {
			c.StateDir = ""
		} else if dir != "" {
			c.StateDir = dir
		}
	}
	var logFile string
	if json.Unmarshal(top["logFile"], &logFile) == nil && filepath.IsAbs(logFile) {
		c.LogFile = logFile
	}
	if raw, ok := top["cni.dev/valid-attachments"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		if err := json.Unmarshal(raw, &c.ValidAttachments); err != nil {
			c.KeepListErr = fmt.Errorf(`cannot decode "cni.dev/valid-attachments": %w`, err)
		} else {
			c.KeepListGiven = true
		}
	}
	return c
}
