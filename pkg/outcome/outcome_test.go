package outcome

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func rec(i int) Record {
	return Record{ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0", Outcome: TimeoutFail, WaitedMs: 10_000, At: time.Unix(int64(i), 0).UTC()}
}

// TestReaderFollowsAcrossRotation: every record appended is read once,
// in order, also when the journal rotates between reads; a reader that
// starts at the end skips what was there.
func TestReaderFollowsAcrossRotation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "podnet") // created by Append
	for i := range 3 {
		if err := Append(dir, rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	late := NewReader(dir, true)
	r := NewReader(dir, false)
	var got []string
	read := func(r *Reader) {
		recs, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range recs {
			got = append(got, x.ContainerID)
		}
	}
	read(r)
	// Enough records to rotate at least once, read in between.
	n := MaxBytes/100 + 10
	for i := 3; i < n; i++ {
		Append(dir, rec(i))
		if i%500 == 0 {
			read(r)
		}
	}
	read(r)
	if _, err := os.Stat(filepath.Join(dir, FileName+".1")); err != nil {
		t.Fatalf("the journal did not rotate: %v", err)
	}
	if len(got) != n {
		t.Fatalf("read %d records, want %d", len(got), n)
	}
	for i, id := range got {
		if id != fmt.Sprintf("c%d", i) {
			t.Fatalf("record %d is %s", i, id)
		}
	}
	got = nil
	read(late)
	if len(got) == 0 || got[0] != "c3" {
		t.Errorf("a reader from the end first read %v, want c3 onwards", got[:min(3, len(got))])
	}
}

// TestPartialLineWaits: a line without its newline is read once whole.
func TestPartialLineWaits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	os.WriteFile(path, []byte(`{"containerID":"c1","outcome":"timeout_fail"`), 0o644)
	r := NewReader(dir, false)
	if recs, _ := r.Read(); len(recs) != 0 {
		t.Fatalf("read a partial line: %+v", recs)
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`,"waitedMs":5}` + "\n")
	f.Close()
	if recs, err := r.Read(); err != nil || len(recs) != 1 || recs[0].WaitedMs != 5 {
		t.Errorf("Read = %+v, %v; want the completed record", recs, err)
	}
}
