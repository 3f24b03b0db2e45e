package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/netready/netready/pkg/atomicfile"
)

// StaleTempAge is how long a temp file must have been unchanged before a
// sweep removes it. A write takes far less, so one this old was killed; a
// younger one may be a write in progress (an ADD's marker, the sidecar's
// re-check, STATUS's own records), whose rename would fail if it went.
const StaleTempAge = time.Minute

// Age says which of a temp file's times a sweep reads its age from.
type Age int

const (
	// Changed is the inode's change time, which also moves when
	// atomicfile.Replace swaps a temp file with its target: right for any
	// file that may be replaced so (markers).
	Changed Age = iota
	// Modified is the modification time: enough for files that are only
	// ever written whole (atomicfile.Write).
	Modified
)

// Sweep removes from the network folder dir the temp files that writers
// killed while writing left, those unchanged (by age) for StaleTempAge
// before now: of every file, or, when of is not "", of the file named of
// only. It never looks outside dir, and a missing dir holds nothing. It
// returns the names it removed.
func Sweep(dir, of string, age Age, now time.Time) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, atomicfile.TempPrefix) || !e.Type().IsRegular() {
			continue
		}
		if target, ok := atomicfile.TempTarget(name); of != "" && (!ok || target != of) {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(timeOf(info, age)) < StaleTempAge {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("sweep: remove %s: %w", name, err))
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

func timeOf(info fs.FileInfo, age Age) time.Time {
	if age == Modified {
		return info.ModTime()
	}
	return changedAt(info)
}
