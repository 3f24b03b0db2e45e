package logfile

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// readLines returns the lines of path and path.1, and those that are not
// whole records.
func readLines(t *testing.T, path string) (lines map[string]int, broken []string) {
	t.Helper()
	lines = map[string]int{}
	for _, p := range []string{path + ".1", path} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			l := sc.Text()
			if !strings.HasPrefix(l, "record ") || !strings.HasSuffix(l, " end") {
				broken = append(broken, l)
			}
			lines[l]++
		}
		f.Close()
	}
	return lines, broken
}

// TestConcurrentWritersLoseNothing: writers with their own descriptors,
// as separate plugin processes have, append while the file rotates; every
// record is there once and whole.
func TestConcurrentWritersLoseNothing(t *testing.T) {
	const writers, records = 8, 2000
	path := filepath.Join(t.TempDir(), "log", "netready.log") // the folder is created
	pad := strings.Repeat("x", 80)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &Writer{Path: path, MaxBytes: 1 << 20}
			for j := range records {
				if _, err := fmt.Fprintf(w, "record %d %d %s end\n", i, j, pad); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	lines, broken := readLines(t, path)
	if len(broken) > 0 {
		t.Errorf("%d records are not whole, e.g. %q", len(broken), broken[0])
	}
	for i := range writers {
		for j := range records {
			if c := lines[fmt.Sprintf("record %d %d %s end", i, j, pad)]; c != 1 {
				t.Fatalf("record %d %d is there %d times", i, j, c)
			}
		}
	}
	if _, err := os.Stat(path + ".1"); err != nil {
		t.Errorf("1.6 MB with a 1 MB bound did not rotate: %v", err)
	}
}

// TestBounded: the file and its rotation stay within the bound.
func TestBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "netready.log")
	w := &Writer{Path: path, MaxBytes: 10_000}
	for i := range 2000 {
		fmt.Fprintf(w, "record %d end\n", i)
	}
	for _, p := range []string{path, path + ".1"} {
		st, err := os.Stat(p)
		if err != nil || st.Size() > w.MaxBytes {
			t.Errorf("%s: %v, size %d; want at most %d", p, err, st.Size(), w.MaxBytes)
		}
	}
	lines, _ := readLines(t, path)
	if lines["record 1999 end"] != 1 {
		t.Error("the last record is not in the file")
	}
}
