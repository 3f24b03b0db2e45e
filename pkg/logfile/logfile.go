// Package logfile owns the plugin's log file: many short-lived plugin
// processes append to it at once, each record with one write, and it is
// kept under a size bound by one rotation to <path>.1.
package logfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultMaxBytes is the size past which the file is rotated: the file
// and its one rotation hold at most twice this.
const DefaultMaxBytes = 10 << 20

// Writer appends records to Path. Each Write opens the file with
// O_APPEND, writes the record in one write(2), and closes it: the kernel
// serialises appends to a regular file, so records of concurrent
// processes never interleave, and a rotation by another process is seen
// at the next record. A record that would take the file past MaxBytes
// first rotates it to Path.1, replacing the previous rotation, under an
// flock on Path.lock so that concurrent writers rotate once.
//
// A record is lost only if its writer opened the file, two rotations
// then happened before its write (the second unlinking the file it
// holds), all within microseconds: more than MaxBytes of records in
// that time.
type Writer struct {
	Path     string
	MaxBytes int64
}

// New returns a Writer for path with the default bound.
func New(path string) *Writer { return &Writer{Path: path, MaxBytes: DefaultMaxBytes} }

// Write appends one record.
func (w *Writer) Write(p []byte) (int, error) {
	f, err := w.open(int64(len(p)))
	if err != nil {
		return 0, err
	}
	n, err := f.Write(p)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// open opens the file for appending, rotating it first when a record of
// size n would take it past MaxBytes.
func (w *Writer) open(n int64) (*os.File, error) {
	f, err := w.openFile()
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil || st.Size() == 0 || st.Size()+n <= w.MaxBytes {
		return f, nil
	}
	f.Close()
	if err := w.rotate(n); err != nil {
		return nil, err
	}
	return w.openFile()
}

func (w *Writer) openFile() (*os.File, error) {
	f, err := os.OpenFile(w.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(w.Path), 0o755); err != nil {
			return nil, fmt.Errorf("create the log folder: %w", err)
		}
		f, err = os.OpenFile(w.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	}
	return f, err
}

// rotate renames the file to Path.1 unless another writer did so while
// this one waited for the lock.
func (w *Writer) rotate(n int64) error {
	lock, err := os.OpenFile(w.Path+".lock", os.O_RDONLY|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("open the log's lock file: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock the log: %w", err)
	}
	defer func() { _ = unix.Flock(int(lock.Fd()), unix.LOCK_UN) }()
	st, err := os.Stat(w.Path)
	if err != nil || st.Size()+n <= w.MaxBytes {
		return nil // rotated by another writer, or gone
	}
	if err := os.Rename(w.Path, w.Path+".1"); err != nil {
		return fmt.Errorf("rotate the log: %w", err)
	}
	return nil
}
