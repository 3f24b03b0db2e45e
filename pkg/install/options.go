// Package install owns netready's place in a node's CNI configuration:
// the installer's options and their checks, putting the entry last in the
// conflist the runtime uses (or in its plugin folder), copying the binary,
// keeping the entry there when a vendor rewrites the file, uninstalling,
// and checking an entry offline (--validate).
package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/conflist"
)

// Modes of installation.
const (
	ModeConflist  = "conflist"
	ModePluginDir = "plugin-dir"
)

// Options are the installer's flags.
type Options struct {
	ConfDir      string
	BinDir       string
	Network      string
	Config       string
	PluginBinary string
	Mode         string
	// CNIVersion "auto" raises the conflist's cniVersion to 1.1.0 when
	// every plugin of the chain supports it; "" leaves it.
	CNIVersion  string
	Watch       bool
	Uninstall   bool
	Resync      time.Duration
	WaitTimeout time.Duration

	// snippet is Config read (a file, or inline JSON).
	snippet []byte
}

// Defaults fills in what the flags left out.
func (o *Options) Defaults() {
	if o.PluginBinary == "" && !o.Uninstall {
		if self, err := os.Executable(); err == nil {
			o.PluginBinary = filepath.Join(filepath.Dir(self), "netready")
		}
	}
	if o.Resync <= 0 {
		o.Resync = time.Minute
	}
}

// Validate checks everything that can be checked before a write, so that
// bad input changes nothing. It reads --config.
func (o *Options) Validate() error {
	var errs []error
	for flagName, dir := range map[string]string{"--conf-dir": o.ConfDir, "--bin-dir": o.BinDir} {
		if flagName == "--bin-dir" && o.Uninstall {
			continue
		}
		if err := writableDir(dir); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", flagName, err))
		}
	}
	if o.Mode != ModeConflist && o.Mode != ModePluginDir {
		errs = append(errs, fmt.Errorf("--mode %q must be %q or %q", o.Mode, ModeConflist, ModePluginDir))
	}
	switch {
	case o.CNIVersion != "" && o.CNIVersion != CNIVersionAuto:
		errs = append(errs, fmt.Errorf("--cni-version %q: the one value is %q (raise cniVersion to 1.1.0 when every plugin supports it)", o.CNIVersion, CNIVersionAuto))
	case o.CNIVersion == CNIVersionAuto && o.Mode == ModePluginDir:
		errs = append(errs, fmt.Errorf("--cni-version auto edits the conflist, which --mode plugin-dir leaves as the vendor wrote it: use --mode conflist, or raise cniVersion in the network plugin's own config"))
	}
	if !o.Uninstall {
		if info, err := os.Stat(o.PluginBinary); err != nil {
			errs = append(errs, fmt.Errorf("--plugin-binary: %w", err))
		} else if !info.Mode().IsRegular() {
			errs = append(errs, fmt.Errorf("--plugin-binary %s is not a file", o.PluginBinary))
		}
	}
	switch c := strings.TrimSpace(o.Config); {
	case c == "":
	case strings.HasPrefix(c, "{"), strings.HasPrefix(c, "["):
		o.snippet = []byte(c)
	default:
		data, err := readConfig(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("--config: %w", err))
		}
		o.snippet = data
	}
	return errors.Join(errs...)
}

// readConfig reads the entry from a file, or from a folder of fragments:
// its *.json files in name order, each a JSON merge patch (RFC 7386) on
// the ones before, so that kustomize components can each add keys to one
// ConfigMap (a list such as "checks" is replaced, not appended to).
func readConfig(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return os.ReadFile(path)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	merged := []byte("{}")
	n := 0
	for _, e := range entries {
		// A ConfigMap volume keeps its real files in ..data folders.
		if strings.HasPrefix(e.Name(), ".") || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		frag, err := os.ReadFile(filepath.Join(path, e.Name()))
		if err != nil {
			return nil, err
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(frag, &obj); err != nil {
			return nil, fmt.Errorf("%s: must be a JSON object: %w", e.Name(), err)
		}
		if merged, err = jsonpatch.MergePatch(merged, frag); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s holds no *.json fragment", path)
	}
	return merged, nil
}

// validateEntry checks the entry with the plugin's own rules before any
// config is known, so that a bad one fails at once; ensure checks it again
// merged with the chosen file's name and cniVersion. The error is the
// plugin's own message.
func validateEntry(snippet []byte) error {
	entry, err := conflist.Entry(snippet)
	if err != nil {
		return err
	}
	probe := &conflist.File{Raw: []byte(`{"cniVersion":"1.1.0","name":"netready-install-check"}`)}
	merged, err := probe.Merged(entry)
	if err != nil {
		return err
	}
	if _, err := config.Parse(merged); err != nil {
		return err
	}
	return nil
}

// writableDir: an existing folder this process can write. Root ignores
// permission bits, so this catches a missing folder and a read-only mount.
func writableDir(dir string) error {
	info, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s does not exist", dir)
	}
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	if err := canWrite(dir); err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	return nil
}
