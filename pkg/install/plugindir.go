package install

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/netready/netready/pkg/conflist"
)

// pluginDirName is netready's file in the network's plugin folder.
const pluginDirName = "netready.conf"

// ensurePluginDir writes <confDir>/<network>/netready.conf, which libcni
// 1.3+ appends to the network's chain, and takes a netready entry out of
// the primary's file if an earlier conflist-mode install left one. It
// reports whether it wrote netready.conf.
func (in *installer) ensurePluginDir(f *conflist.File, entry json.RawMessage) (bool, error) {
	if f.HasEntry() {
		data, _, err := f.WithoutEntry()
		if err != nil {
			return false, err
		}
		if in.beforeWrite != nil {
			in.beforeWrite(f.Path)
		}
		// An entry that comes back there is added, not removed: no revert.
		if _, err := in.replace(f, data, false); err != nil {
			return false, err
		}
	}
	dir := filepath.Join(in.opts.ConfDir, f.Network)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	var pretty []byte
	pretty, err := json.MarshalIndent(json.RawMessage(entry), "", "  ")
	if err != nil {
		return false, err
	}
	changed, err := in.write(filepath.Join(dir, pluginDirName), append(pretty, '\n'), 0o644)
	if err != nil || !changed {
		return false, err
	}
	in.log.Info("netready is in the network's plugin folder", "file", filepath.Join(dir, pluginDirName))
	return true, pokeDir(in.opts.ConfDir)
}

// pokeDir makes an event in dir: runtimes watch the config folder, not the
// network's plugin folder below it, and reload on any event.
func pokeDir(dir string) error {
	f, err := os.CreateTemp(dir, ".netready-reload-")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}
