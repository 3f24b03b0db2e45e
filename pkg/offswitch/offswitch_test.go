package offswitch

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/netready/netready/pkg/statedir"
)

// TestNoteIsThePluginsFile: the note is statedir.Off, written once
// however often the switch is seen on, and gone once it is off, also when
// there was none.
func TestNoteIsThePluginsFile(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		if err := Note(dir, true); err != nil || !Noted(dir) {
			t.Fatalf("Note(on) = %v, noted %v", err, Noted(dir))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, statedir.Off)); err != nil {
		t.Errorf("the note is not where the plugin looks: %v", err)
	}
	for range 2 {
		if err := Note(dir, false); err != nil || Noted(dir) {
			t.Fatalf("Note(off) = %v, noted %v", err, Noted(dir))
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left in stateDir: %v", entries)
	}
}
