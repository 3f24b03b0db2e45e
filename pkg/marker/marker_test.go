package marker

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/statedir"
)

func sample() *Marker {
	created := time.Date(2026, 11, 21, 12, 0, 0, 1, time.UTC)
	ready := created.Add(250 * time.Millisecond)
	return &Marker{
		Version: Version, Network: "podnet", ContainerID: "4f1c", IfName: "eth0",
		NetNS: "/var/run/netns/cni-1", Pod: attachment.Pod{Namespace: "default", Name: "web-0", UID: "u-1"},
		IPs: []string{"10.1.0.5/24"}, State: StateReady,
		CreatedAt: Time{created}, ReadyAt: &Time{ready}, WaitedMs: 250,
		Checks: []CheckResult{{Kind: "route", Target: "10.1.0.5", Ready: true, WaitedMs: 3}},
	}
}

func TestWriteReadFormat(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	m := sample()
	if err := s.Write(m); err != nil {
		t.Fatalf("Write: %v", err)
	}
	path := filepath.Join(s.Dir, "podnet", "4f1c_eth0.json")
	info, err := os.Stat(path)
	if err != nil {
		t.Fatalf("marker not at %s: %v", path, err)
	}
	if info.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, want 0644", info.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	wantFields := map[string]any{
		"version": 1.0, "network": "podnet", "containerID": "4f1c", "ifName": "eth0",
		"netns": "/var/run/netns/cni-1",
		"pod":   map[string]any{"namespace": "default", "name": "web-0", "uid": "u-1"},
		"ips":   []any{"10.1.0.5/24"}, "state": "ready",
		"createdAt": "2026-11-21T12:00:00.000000001Z", "readyAt": "2026-11-21T12:00:00.250000001Z",
		"waitedMs": 250.0,
		"checks":   []any{map[string]any{"kind": "route", "target": "10.1.0.5", "ready": true, "waitedMs": 3.0}},
	}
	if diff := cmp.Diff(wantFields, fields); diff != "" {
		t.Errorf("marker JSON (-want +got):\n%s", diff)
	}
	got, err := s.Read(Key{"podnet", "4f1c", "eth0"})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if diff := cmp.Diff(m, got, cmp.Comparer(func(a, b Time) bool { return a.Equal(b.Time) })); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("folder holds %d entries, want only the marker (no temp files)", len(entries))
	}
}

func TestHostileNamesRefused(t *testing.T) {
	base := t.TempDir()
	s := Store{Dir: filepath.Join(base, "state")}
	tests := []struct {
		name string
		key  Key
		want string
	}{
		{"container ID climbs", Key{"podnet", "../../escape", "eth0"}, "container ID"},
		{"container ID with slash", Key{"podnet", "a/b", "eth0"}, "container ID"},
		{"ifName climbs", Key{"podnet", "abc", ".."}, "interface name"},
		{"ifName with slash", Key{"podnet", "abc", "../x"}, "interface name"},
		{"network climbs", Key{"../net", "abc", "eth0"}, "network name"},
		{"empty container ID", Key{"podnet", "", "eth0"}, "container ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := sample()
			m.Network, m.ContainerID, m.IfName = tt.key.Network, tt.key.ContainerID, tt.key.IfName
			err := s.Write(m)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "refusing") {
				t.Errorf("Write = %v, want a refusal naming the %s", err, tt.want)
			}
			if err := s.Remove(tt.key); err == nil {
				t.Errorf("Remove accepted %+v", tt.key)
			}
		})
	}
	var files []string
	filepath.WalkDir(base, func(p string, d fs.DirEntry, _ error) error {
		if !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 0 {
		t.Errorf("hostile names wrote files: %v", files)
	}
}

func TestRemove(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	k := Key{"podnet", "4f1c", "eth0"}
	if err := s.Remove(k); err != nil {
		t.Errorf("Remove of nothing = %v, want nil", err)
	}
	if err := s.Write(sample()); err != nil {
		t.Fatal(err)
	}
	// What an ADD killed mid-write leaves, and another attachment's.
	killed := filepath.Join(s.Dir, "podnet", atomicfile.TempPrefix+"4f1c_eth0.json.777")
	other := filepath.Join(s.Dir, "podnet", atomicfile.TempPrefix+"4f1c_eth1.json.778")
	os.WriteFile(killed, []byte("{"), 0o644)
	os.WriteFile(other, []byte("{"), 0o644)
	for i := 0; i < 2; i++ {
		if err := s.Remove(k); err != nil {
			t.Errorf("Remove #%d = %v", i+1, err)
		}
	}
	if _, err := s.Read(k); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read after Remove = %v, want not exist", err)
	}
	if _, err := os.Stat(killed); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove left the attachment's temp file")
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("Remove took another attachment's temp file: %v", err)
	}
}

func TestGC(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	write := func(network, cid, ifName string) {
		m := sample()
		m.Network, m.ContainerID, m.IfName = network, cid, ifName
		if err := s.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	write("podnet", "keep", "eth0")
	write("podnet", "keep", "net1") // same container, other interface: not kept
	write("podnet", "gone", "eth0")
	write("othernet", "gone", "eth0")
	dir := filepath.Join(s.Dir, "podnet")
	// Temp files: of a kept marker, of a marker not kept, and of STATUS's
	// records (pool count, failing agents). Fresh, each may be a write in
	// progress; a minute on, each was left by a killed writer.
	temps := []string{
		atomicfile.TempPrefix + "keep_eth0.json.123",
		atomicfile.TempPrefix + "gone_eth0.json.789",
		atomicfile.TempPrefix + ".pool.321",
		atomicfile.TempPrefix + ".agents-failing.654",
	}
	for _, name := range temps {
		os.WriteFile(filepath.Join(dir, name), []byte("{"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "README"), []byte("not ours"), 0o644)
	os.WriteFile(filepath.Join(dir, ".pool"), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(dir, ".agents-failing"), []byte("{}"), 0o644)
	keep := []Key{{"podnet", "keep", "eth0"}}
	listLeft := func() []string {
		var left []string
		for _, d := range []string{"podnet", "othernet"} {
			es, _ := os.ReadDir(filepath.Join(s.Dir, d))
			for _, e := range es {
				left = append(left, d+"/"+e.Name())
			}
		}
		slices.Sort(left)
		return left
	}
	steps := []struct {
		name        string
		now         time.Time
		wantRemoved []string
		wantLeft    []string
	}{
		{"fresh temp files stay", time.Now(),
			[]string{"gone_eth0.json", "keep_net1.json"},
			[]string{"othernet/gone_eth0.json", "podnet/.agents-failing", "podnet/.pool",
				"podnet/" + temps[3], "podnet/" + temps[2], "podnet/" + temps[1], "podnet/" + temps[0],
				"podnet/README", "podnet/keep_eth0.json"}},
		{"temp files unchanged for a minute go", time.Now().Add(statedir.StaleTempAge + time.Second),
			[]string{temps[3], temps[2], temps[1], temps[0]},
			[]string{"othernet/gone_eth0.json", "podnet/.agents-failing", "podnet/.pool", "podnet/README", "podnet/keep_eth0.json"}},
	}
	for _, st := range steps {
		removed, err := s.GC("podnet", keep, st.now)
		if err != nil {
			t.Fatalf("%s: GC: %v", st.name, err)
		}
		slices.Sort(removed)
		if diff := cmp.Diff(st.wantRemoved, removed); diff != "" {
			t.Errorf("%s: removed (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.wantLeft, listLeft()); diff != "" {
			t.Errorf("%s: left (-want +got):\n%s", st.name, diff)
		}
	}
	if _, err := s.GC("../x", nil, time.Now()); err == nil {
		t.Errorf("GC accepted a hostile network name")
	}
	if removed, err := s.GC("nothing-here", nil, time.Now()); err != nil || len(removed) != 0 {
		t.Errorf("GC of a network without markers = %v, %v", removed, err)
	}
}

// TestGCSparesASwappedTempFile: while Replace swaps its temp file with the
// marker, the temp file holds the old marker's content and modification
// time, which may be hours old; it is a write in progress all the same,
// and GC leaves it.
func TestGCSparesASwappedTempFile(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	dir := filepath.Join(s.Dir, "podnet")
	os.MkdirAll(dir, 0o755)
	tmp := filepath.Join(dir, atomicfile.TempPrefix+"keep_eth0.json.123")
	os.WriteFile(tmp, []byte("{"), 0o644)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(tmp, old, old)
	removed, err := s.GC("podnet", []Key{{"podnet", "keep", "eth0"}}, time.Now())
	if err != nil || len(removed) != 0 {
		t.Errorf("GC = %v, %v; want the temp file swapped a moment ago left alone", removed, err)
	}
}

// TestReadFileTrustsOnlyItsOwnName: a marker is read by the name DEL and
// GC go by; content naming another attachment is refused, also where "_"
// makes the file name ambiguous.
func TestReadFileTrustsOnlyItsOwnName(t *testing.T) {
	tests := []struct {
		name          string
		network       string
		cid, ifName   string
		fileNet, file string
		wantErr       string
	}{
		{"own name", "podnet", "abc", "eth0", "podnet", "abc_eth0.json", ""},
		{"underscores", "podnet", "a_b", "c_d", "podnet", "a_b_c_d.json", ""},
		{"another container", "podnet", "abc", "eth0", "podnet", "xyz_eth0.json", "names another attachment"},
		{"same file name, other split", "podnet", "a_b", "c", "podnet", "a_b_c.json", ""},
		{"other split of the same name", "podnet", "a", "b_c", "podnet", "a_b_c.json", ""},
		{"another interface", "podnet", "abc", "net1", "podnet", "abc_eth0.json", "names another attachment"},
		{"another network", "othernet", "abc", "eth0", "podnet", "abc_eth0.json", "names another attachment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := sample()
			m.Network, m.ContainerID, m.IfName = tt.network, tt.cid, tt.ifName
			data, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), tt.fileNet, tt.file)
			os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = ReadFile(path)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("ReadFile: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("ReadFile = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestReadFileRefusesUnknownState(t *testing.T) {
	m := sample()
	m.State = "maybe"
	data, _ := json.Marshal(m)
	path := filepath.Join(t.TempDir(), m.Network, Key{Network: m.Network, ContainerID: m.ContainerID, IfName: m.IfName}.FileName())
	os.MkdirAll(filepath.Dir(path), 0o755)
	os.WriteFile(path, data, 0o644)
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), `state "maybe"`) {
		t.Errorf("ReadFile = %v, want an error naming the state", err)
	}
}

// TestOnlyUnmet: a marker waits only on a kind when one of its results of
// that kind is unmet and every other result is met.
func TestOnlyUnmet(t *testing.T) {
	const kind = "cilium-endpoint-published"
	met := CheckResult{Kind: "address", Ready: true}
	unmet := CheckResult{Kind: "address"}
	left := CheckResult{Kind: kind}
	tests := []struct {
		name   string
		checks []CheckResult
		want   bool
	}{
		{"only that kind unmet", []CheckResult{met, left}, true},
		{"another unmet too", []CheckResult{unmet, left}, false},
		{"that kind met", []CheckResult{met, {Kind: kind, Ready: true}}, false},
		{"none", nil, false},
	}
	for _, tt := range tests {
		if got := (&Marker{Checks: tt.checks}).OnlyUnmet(kind); got != tt.want {
			t.Errorf("%s: OnlyUnmet = %v, want %v", tt.name, got, tt.want)
		}
	}
}
