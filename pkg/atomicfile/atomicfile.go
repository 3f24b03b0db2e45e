// Package atomicfile owns writing a file so that readers see the old content
// or the new, never part of it, and the new content survives a crash: a temp
// file in the same folder, fsync, rename, fsync of the folder. Replace also
// never brings back a file that was removed meanwhile.
package atomicfile

import (
	"bytes"
	"errors"
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
func Write(path string, data []byte, perm fs.FileMode) error {
	tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// errNoExchange: the system or file system cannot swap two paths.
var errNoExchange = errors.New("no atomic exchange here")

// ErrChanged says that Replace found another content than the one it was
// to replace, and left it in place.
var ErrChanged = errors.New("the file changed meanwhile; left as it is")

// Replace writes data to path only if path exists and same accepts what
// it holds, in one step: the new file and the old are swapped
// (renameat2 RENAME_EXCHANGE), so a removal of path just before is never
// undone. It returns an error wrapping fs.ErrNotExist if path does not
// exist (nothing is created), and ErrChanged if same refused the content,
// which is then put back. Where the file system cannot swap, it reads,
// compares and renames, which leaves a short window.
func Replace(path string, data []byte, perm fs.FileMode, same func(old []byte) bool) error {
	tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	err = exchange(tmp, path)
	switch {
	case errors.Is(err, errNoExchange):
		defer os.Remove(tmp)
		return replaceByRename(tmp, path, same)
	case err != nil:
		os.Remove(tmp)
		return fmt.Errorf("replace %s: %w", path, err)
	}
	// tmp now holds what path held.
	old, err := os.ReadFile(tmp)
	if err == nil && same(old) {
		// Only what was expected goes; a writer that replaced path since
		// the swap replaced data, and keeps its file.
		os.Remove(tmp)
		return SyncDir(filepath.Dir(path))
	}
	if err != nil {
		// Unread (nil): putBack never takes it for stale.
		old = nil
	}
	if err := putBack(tmp, path, data, old); err != nil {
		return fmt.Errorf("replace %s: putting back what it held: %w", path, err)
	}
	return fmt.Errorf("replace %s: %w", path, ErrChanged)
}

// putBackRounds bounds putBack against a writer that keeps renaming new
// content into place.
const putBackRounds = 8

// putBack undoes Replace's swap: tmp holds what path held (old), path holds
// placed (Replace's data). Another writer may rename newer content into
// path at any moment; each swap hands tmp what path held just before, so
// tmp is removed only when that is what this function placed there itself
// (placed, then the content it put back, both older than what path holds
// then). Content that another writer put there meanwhile, the newest, is
// swapped back into path, never deleted. A path removed meanwhile stays
// removed.
func putBack(tmp, path string, placed, old []byte) error {
	for range putBackRounds {
		if err := exchange(tmp, path); errors.Is(err, fs.ErrNotExist) {
			// Removed after every write to it: the removal is the newest.
			os.Remove(tmp)
			return nil
		} else if err != nil {
			return fmt.Errorf("%w (%s keeps what it held)", err, tmp)
		}
		got, err := os.ReadFile(tmp)
		if err != nil {
			return fmt.Errorf("read %s: %w", tmp, err)
		}
		if bytes.Equal(got, placed) {
			os.Remove(tmp)
			return SyncDir(filepath.Dir(path))
		}
		// Another writer's content, newer than what path holds now (old):
		// it goes back, and old is what path should then hold.
		placed, old = old, got
		if placed == nil {
			// What was put back was never read: both stay.
			return fmt.Errorf("%s changed while being put back; %s keeps the other version", path, tmp)
		}
	}
	return fmt.Errorf("%s keeps changing; %s keeps a version of it", path, tmp)
}

// RemoveIf removes path only if same accepts what it holds, in one step
// as Replace: the file is renamed away first, so a writer that renames
// new content into path meanwhile keeps it. Refused content goes back
// unless a newer file took its place, and RemoveIf returns ErrChanged. It
// returns an error wrapping fs.ErrNotExist if path does not exist.
func RemoveIf(path string, same func(old []byte) bool) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	// A unique name to rename to, in the same folder.
	f, err := os.CreateTemp(dir, TempPrefix+base+".")
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	f.Close()
	tmp := f.Name()
	if err := os.Rename(path, tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if old, err := os.ReadFile(tmp); err == nil && same(old) {
		os.Remove(tmp)
		return SyncDir(dir)
	}
	// Back, without replacing a file written since (link never does).
	switch err := os.Link(tmp, path); {
	case err == nil:
	case errors.Is(err, fs.ErrExist):
		// Renamed into path after tmp was taken, so newer: it stays.
	default:
		return fmt.Errorf("remove %s: putting it back: %w (%s keeps it)", path, err, tmp)
	}
	os.Remove(tmp)
	if err := SyncDir(dir); err != nil {
		return err
	}
	return fmt.Errorf("remove %s: %w", path, ErrChanged)
}

// replaceByRename is Replace without an atomic swap.
func replaceByRename(tmp, path string, same func(old []byte) bool) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	if !same(old) {
		return fmt.Errorf("replace %s: %w", path, ErrChanged)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// writeTemp writes data, synced, to a new temp file next to path, and
// returns its name.
func writeTemp(path string, data []byte, perm fs.FileMode) (name string, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, TempPrefix+base+".")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return f.Name(), nil
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
