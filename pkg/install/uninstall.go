package install

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/netready/netready/pkg/conflist"
)

// uninstall takes netready's entry out of every config in the folder and
// its plugin-folder file. It touches nothing else: the binary stays, unused.
// A config that changes while it is being edited is read again.
func (in *installer) uninstall() error {
	return in.untilUnchanged("taking its entry out", in.uninstallOnce)
}

func (in *installer) uninstallOnce() error {
	entries, err := os.ReadDir(in.opts.ConfDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		path := filepath.Join(in.opts.ConfDir, e.Name())
		if e.IsDir() {
			p := filepath.Join(path, pluginDirName)
			if err := os.Remove(p); err == nil {
				in.log.Info("removed", "file", p)
				os.Remove(path) // only if empty
				if err := pokeDir(in.opts.ConfDir); err != nil {
					return err
				}
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			continue
		}
		if !conflist.IsConfigName(e.Name()) {
			continue
		}
		f, err := conflist.Load(path)
		if err != nil || !f.HasEntry() {
			continue
		}
		data, _, err := f.WithoutEntry()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if in.beforeWrite != nil {
			in.beforeWrite(path)
		}
		// Never a backoff: the entry stays out however often it comes
		// back.
		changed, err := in.replace(f, data, false)
		if err != nil {
			return err
		}
		if changed {
			in.log.Info("removed netready from the chain", "file", path)
		}
	}
	return nil
}
