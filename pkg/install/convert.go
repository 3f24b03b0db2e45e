package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/conflist"
)

// A single-plugin .conf becomes <name>.conflist. A file already at that
// name may be another writer's (a vendor's conflist of another network
// beside a .conf): it is never written over. Only a conflist this
// installer made from the .conf is taken: the .conf's network, the keys a
// conversion writes and one plugin besides netready's entry, which holds
// the entry (the vendor rewrote the .conf since) or is the .conf's own
// plugin (nothing of it is lost).

// checkConvertTarget refuses a conversion of f whose conflist would go
// over another writer's file. It returns what target holds, nil when there
// is none.
func checkConvertTarget(f *conflist.File, target string) ([]byte, error) {
	old, err := os.ReadFile(target)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("convert %s: read %s: %w", f.Path, target, err)
	}
	if why := notAConversion(f, target, old); why != "" {
		return nil, refuse("cannot convert %s to a conflist: %s exists and %s, so another writer owns it. netready-install writes over neither file: remove the one the runtime should not use (it reads %s first), then restart netready-install",
			f.Path, target, why, filepath.Base(f.Path))
	}
	return old, nil
}

// notAConversion says why old, at target, is not a conflist this
// installer made from the .conf f, or "" when it is one.
func notAConversion(f *conflist.File, target string, old []byte) string {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(old, &top); err != nil {
		return "is not a JSON object"
	}
	for k := range top {
		if k != "cniVersion" && k != "name" && k != "plugins" {
			return fmt.Sprintf("has the key %q, which a conversion never writes", k)
		}
	}
	var name string
	if err := json.Unmarshal(top["name"], &name); err != nil || name != f.Network {
		return fmt.Sprintf("is the config of network %s, not %q", top["name"], f.Network)
	}
	var plugins []json.RawMessage
	if err := json.Unmarshal(top["plugins"], &plugins); err != nil {
		return "has no plugins list"
	}
	g := &conflist.File{Path: target, Network: name, List: true, Raw: old, Plugins: plugins}
	rest, _, err := g.WithoutEntry()
	if err != nil {
		return "holds no plugin but netready"
	}
	var others struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(rest, &others); err != nil || len(others.Plugins) != 1 {
		return fmt.Sprintf("chains %d plugins besides netready, where a conversion has one", len(others.Plugins))
	}
	if g.HasEntry() {
		return ""
	}
	conv, _, err := f.WithoutEntry()
	var own struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	if err != nil || json.Unmarshal(conv, &own) != nil || len(own.Plugins) != 1 ||
		!bytes.Equal(compact(own.Plugins[0]), compact(others.Plugins[0])) {
		return "holds neither netready's entry nor the plugin of " + filepath.Base(f.Path)
	}
	return ""
}

// writeConverted puts data, the conflist made from the .conf f, at target:
// it creates the file only where none is, and replaces one only if it
// still holds what checkConvertTarget accepted. It returns an error
// wrapping atomicfile.ErrChanged when target changed meanwhile.
func (in *installer) writeConverted(f *conflist.File, target string, data []byte) (bool, error) {
	old, err := checkConvertTarget(f, target)
	if err != nil {
		return false, err
	}
	if in.beforeWrite != nil {
		in.beforeWrite(target)
	}
	if old == nil {
		if err := createNew(target, data, f.Mode); err != nil {
			return false, err
		}
		in.written[target] = data
		return true, nil
	}
	if bytes.Equal(old, data) {
		if info, err := os.Stat(target); err == nil && info.Mode().Perm() == f.Mode {
			return false, nil
		}
	}
	err = atomicfile.Replace(target, data, f.Mode, func(b []byte) bool { return bytes.Equal(b, old) })
	if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("%s went away: %w", target, atomicfile.ErrChanged)
	}
	if err != nil {
		return false, err
	}
	if _, before := in.written[target]; before {
		// A re-conversion after the vendor rewrote its .conf: the revert
		// counts, the write stands.
		in.noteRevert(target)
	}
	in.written[target] = data
	return true, nil
}

// createNew writes data to a new file at path, atomically, and never over
// a file another writer created meanwhile: a temp file is linked to path,
// which fails where path exists. That returns an error wrapping
// atomicfile.ErrChanged.
func createNew(path string, data []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), atomicfile.TempPrefix+filepath.Base(path)+".")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s appeared meanwhile: %w", path, atomicfile.ErrChanged)
	} else if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}

// removeConverted removes the .conf that f was read from once its
// conflist, data, is at target: the new file is in place before the old
// one goes, so the runtime never sees neither. A .conf that changed
// meanwhile stays (atomicfile.RemoveIf), and the conflist made from its
// old content goes, unless another writer replaced it already.
func (in *installer) removeConverted(f *conflist.File, target string, data []byte) error {
	if in.beforeRemove != nil {
		in.beforeRemove(f.Path)
	}
	err := atomicfile.RemoveIf(f.Path, func(old []byte) bool { return bytes.Equal(old, f.Raw) })
	switch {
	case errors.Is(err, atomicfile.ErrChanged):
		if err := atomicfile.RemoveIf(target, func(old []byte) bool { return bytes.Equal(old, data) }); err == nil {
			delete(in.written, target)
		}
		return fmt.Errorf("convert %s: %w", f.Path, err)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("remove %s after converting it: %w", f.Path, err)
	}
	in.log.Info("converted a single-plugin config to a conflist", "from", f.Path, "to", target)
	return nil
}
