package pool

import (
	"encoding/json"
	"fmt"
	"net"
	"testing"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
	"github.com/google/go-cmp/cmp"
)

// hostLocalView is what host-local's own allocator package reads from an
// ipam object: an error, or the dataDir and each range's subnet, start, end
// and gateway. The plugin does not link that package (see ranges.go); these
// tests hold pool's reading to it.
func hostLocalView(ipam json.RawMessage) (string, error) {
	conf, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "n", "ipam": ipam})
	cfg, _, err := allocator.LoadIPAMConfig(conf, "")
	if err != nil {
		return "", err
	}
	s := "dataDir=" + cfg.DataDir
	for i, rs := range cfg.Ranges {
		for _, r := range rs {
			s += fmt.Sprintf(" set%d:%s,%s-%s,gw=%s", i, (*net.IPNet)(&r.Subnet), r.RangeStart, r.RangeEnd, r.Gateway)
		}
	}
	return s, nil
}

func poolView(ipam json.RawMessage) (string, error) {
	dataDir, sets, err := loadRanges(ipam)
	if err != nil {
		return "", err
	}
	s := "dataDir=" + dataDir
	for i, rs := range sets {
		for _, r := range rs {
			s += fmt.Sprintf(" set%d:%s,%s-%s,gw=%s", i, r.subnet, r.start, r.end, r.gateway)
		}
	}
	return s, nil
}

// compareWithHostLocal fails unless pool and host-local accept the same
// ipam objects and read the same ranges from them.
func compareWithHostLocal(t *testing.T, ipam string) {
	t.Helper()
	want, wantErr := hostLocalView(json.RawMessage(ipam))
	got, gotErr := poolView(json.RawMessage(ipam))
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("ipam %s: host-local error %v, pool error %v", ipam, wantErr, gotErr)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ipam %s: ranges differ from host-local's (-want +got):\n%s", ipam, diff)
	}
}

var rangeCases = []string{
	// Defaults.
	`{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/30"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/31"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/32"}]]}`,
	`{"ranges":[[{"subnet":"0.0.0.0/0"}]]}`,
	`{"ranges":[[{"subnet":"fd00:1::/64"}]]}`,
	`{"ranges":[[{"subnet":"fd00:1::/126"}]]}`,
	`{"ranges":[[{"subnet":"fd00:1::/127"}]]}`,
	`{"ranges":[[{"subnet":"::/0"}]]}`,
	`{"dataDir":"/run/ipam","ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"fd00:1::/120"}]]}`,
	// Bounds and gateway.
	`{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.10","rangeEnd":"10.1.0.20","gateway":"10.1.0.1"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.20","rangeEnd":"10.1.0.10"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.0"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","rangeEnd":"10.1.0.255"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.1.5"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","rangeEnd":"10.1.0.0"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.5","rangeEnd":"fd00::5"}]]}`,
	`{"ranges":[[{"subnet":"fd00::/64","rangeStart":"fd00::5","rangeEnd":"10.1.0.5"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","gateway":"192.168.0.1"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","gateway":""}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","gateway":"fd00::1"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"::ffff:10.1.0.9","gateway":"::ffff:10.1.0.3"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"nonsense"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"fe80::1%eth0"}]]}`,
	// Subnets as written.
	`{"ranges":[[{"subnet":"10.1.0.5/24"}]]}`,
	`{"ranges":[[{"subnet":"::ffff:10.1.0.0/120"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/024"}]]}`,
	`{"ranges":[[{"subnet":"fe80::/64%eth0"}]]}`,
	`{"ranges":[[{"subnet":""}]]}`,
	`{"ranges":[[{"subnet":null}]]}`,
	`{"ranges":[[{"subnet":24}]]}`,
	`{"ranges":[[{}]]}`,
	`{"ranges":[[{"SUBNET":"10.1.0.0/24"}]]}`,
	// Sets.
	`{"ranges":[]}`,
	`{"ranges":[[]]}`,
	`{"ranges":[null]}`,
	`{"ranges":[[null]]}`,
	`{}`,
	`null`,
	`[]`,
	`{"ranges":[[{"subnet":"10.1.0.0/24"},{"subnet":"fd00::/64"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24"},{"subnet":"10.1.0.0/25"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24","rangeEnd":"10.1.0.100"},{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.101"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"10.1.0.0/16"}]]}`,
	`{"ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"10.2.0.0/24"}]]}`,
	// The old single-range form, alone and before "ranges".
	`{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.100"}`,
	`{"subnet":"10.1.0.0/24","ranges":[[{"subnet":"fd00::/64"}]]}`,
	`{"subnet":"10.1.0.0/24","ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
	`{"subnet":"","ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
	`{"rangeStart":"10.1.0.100","ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
	`{"rangeStart":"bogus","ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
	// Keys host-local decodes but pool does not use.
	`{"routes":"0.0.0.0/0","ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
	`{"routes":[{"dst":"0.0.0.0/0"}],"resolvConf":"/etc/resolv.conf","ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
	`{"type":7,"ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
	`{"name":7,"ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
	`{"dataDir":["x"],"ranges":[[{"subnet":"10.1.0.0/24"}]]}`,
}

func TestRangesMatchHostLocal(t *testing.T) {
	for _, ipam := range rangeCases {
		t.Run(ipam, func(t *testing.T) { compareWithHostLocal(t, ipam) })
	}
}

func TestUsable(t *testing.T) {
	tests := []struct {
		ipam string
		want []string
	}{
		{`{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`, []string{"253"}},
		{`{"ranges":[[{"subnet":"10.1.0.0/30"}]]}`, []string{"1"}},
		{`{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.10","rangeEnd":"10.1.0.19"}]]}`, []string{"10"}},
		{`{"ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.10","rangeEnd":"10.1.0.19","gateway":"10.1.0.15"}]]}`, []string{"9"}},
		{`{"ranges":[[{"subnet":"10.1.0.0/24","gateway":"192.168.0.1"}]]}`, []string{"254"}},
		{`{"ranges":[[{"subnet":"fd00::/120"}]]}`, []string{"254"}},
		{`{"ranges":[[{"subnet":"fd00::/64"}]]}`, []string{"18446744073709551614"}},
		{`{"ranges":[[{"subnet":"10.1.0.0/28"},{"subnet":"10.2.0.0/28"}],[{"subnet":"fd00::/125"}]]}`, []string{"26", "6"}},
	}
	for _, tt := range tests {
		_, sets, err := loadRanges(json.RawMessage(tt.ipam))
		if err != nil {
			t.Fatalf("%s: %v", tt.ipam, err)
		}
		var got []string
		for _, rs := range sets {
			got = append(got, rs.usable().String())
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: usable (-want +got):\n%s", tt.ipam, diff)
		}
	}
}

// FuzzRangesMatchHostLocal builds ipam objects of one or two range sets,
// and the old top-level range, from fuzzed strings, and holds pool's reading
// of them to host-local's.
func FuzzRangesMatchHostLocal(f *testing.F) {
	f.Add("10.1.0.0/24", "", "", "", "fd00::/64", "", "", "", "", uint8(0))
	f.Add("10.1.0.0/24", "10.1.0.10", "10.1.0.20", "10.1.0.1", "10.1.0.0/24", "10.1.0.21", "", "", "", uint8(1))
	f.Add("10.1.0.0/28", "::ffff:10.1.0.2", "10.1.0.14", "", "10.2.0.0/28", "", "", "10.2.0.9", "10.3.0.0/24", uint8(2))
	f.Add("fd00::/125", "fd00::1", "fd00::7", "", "fd00::8/125", "", "", "", "", uint8(3))
	f.Add("10.1.0.4/30", "", "", "", "0.0.0.0/0", "", "", "", "", uint8(0))
	f.Fuzz(func(t *testing.T, subnet1, start1, end1, gw1, subnet2, start2, end2, gw2, top string, shape uint8) {
		r := func(subnet, start, end, gw string) map[string]any {
			m := map[string]any{"subnet": subnet}
			for k, v := range map[string]string{"rangeStart": start, "rangeEnd": end, "gateway": gw} {
				if v != "" {
					m[k] = v
				}
			}
			return m
		}
		a, b := r(subnet1, start1, end1, gw1), r(subnet2, start2, end2, gw2)
		var ranges [][]map[string]any
		switch shape % 3 {
		case 0:
			ranges = [][]map[string]any{{a}}
		case 1:
			ranges = [][]map[string]any{{a, b}}
		case 2:
			ranges = [][]map[string]any{{a}, {b}}
		}
		ipam := map[string]any{"ranges": ranges}
		if shape&4 != 0 {
			ipam["subnet"] = top
		}
		raw, _ := json.Marshal(ipam)
		compareWithHostLocal(t, string(raw))
	})
}
