package pool

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func allocate(t *testing.T, dir string, names ...string) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("cid\r\neth0"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCountPool(t *testing.T) {
	tests := []struct {
		name  string
		ipam  string
		files []string
		want  []string // "rangeset used/usable"
	}{
		{"a /29 is 5 addresses after .0, .1 (gateway) and .7",
			`{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"}]]}`,
			[]string{"10.1.0.2", "10.1.0.3", "last_reserved_ip.0", "lock"},
			[]string{"2/5"}},
		{"rangeStart and rangeEnd; the gateway outside them costs nothing",
			`{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.100","rangeEnd":"10.1.0.109"}]]}`,
			[]string{"10.1.0.100", "10.1.0.5"},
			[]string{"1/10"}},
		{"an explicit gateway inside the range is excluded",
			`{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/28","gateway":"10.1.0.14"}]]}`,
			nil,
			[]string{"0/13"}},
		{"dual stack counts each range set, IPv6 with big numbers",
			`{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"}],[{"subnet":"fd00::/64"}]]}`,
			[]string{"10.1.0.2", "fd00::2"},
			[]string{"1/5", "1/18446744073709551614"}},
		{"two ranges in one set add up",
			`{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"},{"subnet":"10.2.0.0/29"}]]}`,
			[]string{"10.2.0.3"},
			[]string{"1/10"}},
		{"old-style single subnet",
			`{"type":"host-local","subnet":"10.1.0.0/29"}`,
			[]string{"10.1.0.6"},
			[]string{"1/5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := t.TempDir()
			var ipam map[string]any
			json.Unmarshal([]byte(tt.ipam), &ipam)
			ipam["dataDir"] = data
			raw, _ := json.Marshal(ipam)
			allocate(t, filepath.Join(data, "podnet"), tt.files...)
			spec, err := Load("podnet", raw)
			if err != nil {
				t.Fatal(err)
			}
			pools, err := spec.Count()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range pools {
				got = append(got, fmt.Sprintf("%d/%s", p.Used, p.Usable))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("pools (-want +got):\n%s", diff)
			}
		})
	}
}

func TestShort(t *testing.T) {
	tests := []struct {
		name     string
		free     int64
		minFree  int
		wasShort bool
		want     bool
	}{
		{"below minFree", 1, 2, false, true},
		{"exactly minFree, not short before", 2, 2, false, false},
		{"exactly minFree, short before: stays short", 2, 2, true, true},
		{"minFree+1 ends it", 3, 2, true, false},
		{"minFree 0: only a negative pool", 0, 0, false, false},
		{"minFree 0, short before, 0 free stays short", 0, 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Range{Usable: big.NewInt(10), Used: 10 - tt.free}
			if got := Short(r, tt.minFree, tt.wasShort); got != tt.want {
				t.Errorf("Short(free %d, minFree %d, wasShort %v) = %v, want %v", tt.free, tt.minFree, tt.wasShort, got, tt.want)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	got := Describe("podnet", []Range{{Set: "10.1.0.0/28", Usable: big.NewInt(13), Used: 13}, {Set: "fd00::/125", Usable: big.NewInt(6), Used: 2}})
	want := "podnet: 13 of 13 addresses in use in 10.1.0.0/28, 2 of 6 addresses in use in fd00::/125"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Describe (-want +got):\n%s", diff)
	}
}

// TestEachAddress: more names than one getdents buffer holds, and names
// that are not addresses.
func TestEachAddress(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 5000 {
		name := fmt.Sprintf("10.%d.%d.%d", i/65536, (i/256)%256, i%256)
		want = append(want, name)
	}
	want = append(want, "fd00::5", "fd00::a")
	allocate(t, dir, want...)
	allocate(t, dir, "lock", "last_reserved_ip.0", "last_reserved_ip.1", "fe80::1%eth0", "abc", ":x", "10.1.2.3.4")
	got := map[string]bool{}
	if err := eachAddress(dir, func(ip netip.Addr) { got[ip.String()] = true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("%d addresses, want %d", len(got), len(want))
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("missing %s", w)
		}
	}
	if err := eachAddress(filepath.Join(dir, "none"), func(netip.Addr) { t.Error("called for a missing folder") }); err != nil {
		t.Errorf("a missing folder: %v, want nothing allocated", err)
	}
	if err := eachAddress(filepath.Join(dir, "lock"), func(netip.Addr) {}); err == nil {
		t.Error("a file as the folder: no error")
	}
}
