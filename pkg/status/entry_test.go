package status

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/notes"
)

// TestCheckNotesAPoolItCannotCount: with poolAction "notready", an entry
// that ADD accepts but whose pool STATUS cannot count (the chain's
// host-local resolves usePodCidr or names no range, a range host-local
// would refuse, no file for "auto") leaves STATUS green and its note for
// the sidecar, naming what to fix; ADD (NoteEntry) leaves the same note.
// A pool it can count fails STATUS when exhausted and clears the note.
func TestCheckNotesAPoolItCannotCount(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "ipam")
	os.MkdirAll(filepath.Join(data, "podnet"), 0o755)
	for _, ip := range []string{"10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"} {
		os.WriteFile(filepath.Join(data, "podnet", ip), nil, 0o644)
	}
	// chain is a confDir holding the podnet conflist whose first plugin
	// has ipam.
	chain := func(ipam string) string {
		d := t.TempDir()
		list := `{"cniVersion":"1.1.0","name":"podnet","plugins":[{"type":"bridge","ipam":` + ipam + `},{"type":"netready"}]}`
		if err := os.WriteFile(filepath.Join(d, "10-podnet.conflist"), []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	full := `{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"}]],"dataDir":"` + data + `"}`
	tests := []struct {
		name   string
		status string
		want   string // Check's error
		note   string // in the note; "" for none
	}{
		{"auto, the chain's host-local resolves usePodCidr",
			`"ipam":"auto","poolAction":"notready","confDir":"` + chain(`{"type":"host-local","ranges":[[{"subnet":"usePodCidr"}]]}`) + `"`,
			"", `uses host-local with subnet "usePodCidr"`},
		{"auto, the chain's host-local names no range",
			`"ipam":"auto","poolAction":"notready","confDir":"` + chain(`{"type":"host-local"}`) + `"`,
			"", "no IP ranges specified"},
		{"a range host-local would refuse",
			`"ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/33"}]]},"poolAction":"notready"`,
			"", "invalid CIDR address: 10.1.0.0/33"},
		{"auto, no file for the network",
			`"ipam":"auto","poolAction":"notready","confDir":"` + t.TempDir() + `"`,
			"", `ipam "auto"`},
		{"poolAction taint leaves the pool to the sidecar",
			`"ipam":"auto","confDir":"` + chain(`{"type":"host-local","ranges":[[{"subnet":"usePodCidr"}]]}`) + `"`,
			"", ""},
		{"a pool it counts, exhausted",
			`"ipam":` + full + `,"poolAction":"notready"`,
			"IP pool exhausted (5 of 5 addresses in use)", ""},
		{"auto, a pool it counts, exhausted",
			`"ipam":"auto","poolAction":"notready","confDir":"` + chain(full) + `"`,
			"IP pool exhausted (5 of 5 addresses in use)", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := t.TempDir()
			conf, err := config.Parse([]byte(`{"cniVersion":"1.1.0","name":"podnet","type":"netready","stateDir":"` + state + `","status":{` + tt.status + `}}`))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			notePath := filepath.Join(state, "podnet", notes.InvalidConfigFile)
			// A note of an earlier entry, which a good one must clear.
			if err := notes.NoteInvalidConfig(state, "podnet", "an earlier entry"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
			defer cancel()
			got := ""
			if err := Check(ctx, conf); err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Check (-want +got):\n%s", diff)
			}
			readNote := func() string {
				b, err := os.ReadFile(notePath)
				if err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				return string(b)
			}
			afterStatus := readNote()
			switch {
			case tt.note == "" && afterStatus != "":
				t.Errorf("note after STATUS = %q, want none", afterStatus)
			case tt.note != "" && (!strings.Contains(afterStatus, tt.note) || !strings.Contains(afterStatus, `fix "status.ipam"`)):
				t.Errorf("note after STATUS = %q, want it to say %q and what to fix", afterStatus, tt.note)
			}
			// ADD leaves the note as STATUS did, rather than clearing it
			// for the next STATUS to raise anew.
			if err := NoteEntry(conf); err != nil {
				t.Fatalf("NoteEntry: %v", err)
			}
			if diff := cmp.Diff(afterStatus, readNote()); diff != "" {
				t.Errorf("note after ADD differs from STATUS's (-status +add):\n%s", diff)
			}
		})
	}
}
