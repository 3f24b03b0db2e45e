// Package outcome owns the journal of ADD outcomes that leave no marker:
// an ADD that times out with onTimeout "fail" removes its marker, so the
// plugin appends a line to <stateDir>/<network>/.outcomes instead, and the
// sidecar reads the lines as they come to count them. The journal is kept
// under MaxBytes with one rotation (.outcomes.1), so it stays bounded
// however long no sidecar reads it.
package outcome

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/netready/netready/pkg/logfile"
	"github.com/netready/netready/pkg/statedir"
)

// The journal's name in a network's marker folder, and its bound
// (docs/benchmarks.md says how many records fit).
const (
	FileName = statedir.Outcomes
	MaxBytes = 256 << 10
)

// Outcomes of an ADD, as netready_add_wait_seconds labels them.
const (
	Ready          = "ready"
	TimeoutFail    = "timeout_fail"
	TimeoutProceed = "timeout_proceed"
)

// Record is one ADD outcome.
type Record struct {
	ContainerID string    `json:"containerID"`
	IfName      string    `json:"ifName"`
	Outcome     string    `json:"outcome"`
	WaitedMs    int64     `json:"waitedMs"`
	At          time.Time `json:"at"`
}

// Append adds r to the journal in the network folder dir, in one write.
func Append(dir string, r Record) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	w := &logfile.Writer{Path: filepath.Join(dir, FileName), MaxBytes: MaxBytes}
	if _, err := w.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("append to the outcome journal: %w", err)
	}
	return nil
}

// Reader follows one journal: each Read returns the whole lines written
// since the last, across a rotation.
type Reader struct {
	path   string
	ino    uint64 // the file offset belongs to; 0 before the first read
	offset int64
}

// NewReader follows the journal in dir from its start, or, with atEnd,
// from what is there now (records a sidecar before a restart counted).
func NewReader(dir string, atEnd bool) *Reader {
	r := &Reader{path: filepath.Join(dir, FileName)}
	if atEnd {
		if info, err := os.Stat(r.path); err == nil {
			r.ino, r.offset = inode(info), info.Size()
		}
	}
	return r
}

// Read returns the records appended since the last Read. Lines that do
// not decode are skipped and reported in the error, after the rest.
func (r *Reader) Read() ([]Record, error) {
	info, err := os.Stat(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Record
	var errs []error
	if r.ino != 0 && r.ino != inode(info) {
		// Rotated: finish the old file, now .1, if it is still the one.
		if old, err := os.Stat(r.path + ".1"); err == nil && inode(old) == r.ino {
			recs, _, err := readFrom(r.path+".1", r.offset)
			out, errs = append(out, recs...), append(errs, err)
		}
		r.offset = 0
	}
	if info.Size() < r.offset {
		r.offset = 0 // truncated or replaced under the same inode
	}
	r.ino = inode(info)
	recs, n, err := readFrom(r.path, r.offset)
	r.offset += n
	return append(out, recs...), errors.Join(append(errs, err)...)
}

// readFrom decodes the whole lines of path from offset, and returns how
// many bytes they took.
func readFrom(path string, offset int64) ([]Record, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, 0, err
	}
	var out []Record
	var errs []error
	var n int64
	br := bufio.NewReader(f)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			break // a partial last line waits for its end
		}
		n += int64(len(line))
		var rec Record
		if err := json.Unmarshal(bytes.TrimSpace(line), &rec); err != nil {
			errs = append(errs, fmt.Errorf("%s: a record that does not decode: %w", path, err))
			continue
		}
		out = append(out, rec)
	}
	return out, n, errors.Join(errs...)
}

func inode(info fs.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
