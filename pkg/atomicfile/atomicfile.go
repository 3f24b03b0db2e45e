// Package atomicfile owns writing a file so that readers see the old content
// or the new, never part of it, and the new content survives a crash: a temp
// file in the same folder, fsync, rename, fsync of the folder.
package atomicfile

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TempPrefix starts every temp file name. Temp names end in random digits,
// never in an extension a reader looks for (.json, .conf, .conflist).
const TempPrefix = ".tmp-"

// TempTarget returns the file name that a temp file of Write was for, e.g.
// "a.json" for ".tmp-a.json.123", or false if name is not such a temp file.
// Writes killed halfway leave them; their owners remove them by this name.
func TempTarget(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, TempPrefix)
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return "", false
	}
	return rest[:i], true
}

// Write replaces path with data, with mode perm.
func Write(path string, data []byte, perm fs.FileMode) (err error) {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, TempPrefix+name+".")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(dir)
}

// WriteIfChanged writes only when path does not already hold data, and
// reports whether it wrote.
func WriteIfChanged(path string, data []byte, perm fs.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		if info, err := os.Stat(path); err == nil && info.Mode().Perm() == perm {
			return false, nil
		}
	}
	return true, Write(path, data, perm)
}

// SyncDir makes a rename or removal in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
