package offswitch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/statedir"
)

// TestNoteIsThePluginsFile: the note is statedir.Off, written once
// however often the switch is seen on, and gone once it is off, also when
// there was none.
func TestNoteIsThePluginsFile(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		if err := Note(dir, true, time.Now()); err != nil || !Noted(dir) {
			t.Fatalf("Note(on) = %v, noted %v", err, Noted(dir))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, statedir.Off)); err != nil {
		t.Errorf("the note is not where the plugin looks: %v", err)
	}
	for range 2 {
		if err := Note(dir, false, time.Now()); err != nil || Noted(dir) {
			t.Fatalf("Note(off) = %v, noted %v", err, Noted(dir))
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left in stateDir: %v", entries)
	}
}

// TestNoteSweepsTheTempsOfAKilledWrite: a sidecar killed between
// atomicfile's temp and its rename leaves <stateDir>/.tmp-.off.<digits>,
// which no network folder's sweep sees. The next Note, on or off, removes
// it once it is StaleTempAge old; a younger one (a write in progress) and
// temps of other files stay.
func TestNoteSweepsTheTempsOfAKilledWrite(t *testing.T) {
	now := time.Now()
	for _, off := range []bool{true, false} {
		dir := t.TempDir()
		temp := func(of string, age time.Duration) string {
			f, err := os.CreateTemp(dir, atomicfile.TempPrefix+of+".") // as atomicfile names its temps
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			if target, ok := atomicfile.TempTarget(filepath.Base(f.Name())); !ok || target != of {
				t.Fatalf("%s is not a temp of %s for atomicfile", f.Name(), of)
			}
			if err := os.Chtimes(f.Name(), now.Add(-age), now.Add(-age)); err != nil {
				t.Fatal(err)
			}
			return filepath.Base(f.Name())
		}
		temp(statedir.Off, 2*statedir.StaleTempAge)
		young := temp(statedir.Off, time.Second)
		other := temp("agents", 2*statedir.StaleTempAge)
		if err := Note(dir, off, now); err != nil {
			t.Fatalf("Note(%v) = %v", off, err)
		}
		var got []string
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			got = append(got, e.Name())
		}
		want := []string{young, other}
		if off {
			want = append(want, statedir.Off)
		}
		slices.Sort(want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Note(%v) left (-want +got):\n%s", off, diff)
		}
	}
}
