package pool

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/conflist"
)

// TestAutoIPAM: "auto" picks the source from the chain's first plugin:
// its host-local ipam, else its type; it refuses only where none fits,
// naming what it found.
func TestAutoIPAM(t *testing.T) {
	tests := []struct {
		name, first string
		want        string // the ipam object, or the error
	}{
		{"host-local ipam", `{"type":"bridge","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`, `{"subnet":"10.1.0.0/24","type":"host-local"}`},
		{"Cilium's plugin", `{"type":"cilium-cni","enable-debug":false}`, `{"type":"cilium"}`},
		{"the AWS VPC CNI's plugin", `{"type":"aws-cni","vethPrefix":"eni","mtu":"9001"}`, `{"type":"aws-vpc-cni"}`},
		{"Cilium's plugin with host-local (delegated IPAM)", `{"type":"cilium-cni","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`, `{"subnet":"10.1.0.0/24","type":"host-local"}`},
		{"ovn-kubernetes' plugin", `{"type":"ovn-k8s-cni-overlay","ipam":{},"dns":{},"logFile":"/var/log/ovn-kubernetes/ovn-k8s-cni-overlay.log"}`, `{"type":"ovn-kubernetes"}`},
		{"Calico's plugin with calico-ipam", `{"type":"calico","datastore_type":"kubernetes","ipam":{"type":"calico-ipam","assign_ipv4":"true"}}`, `{"assign_ipv4":"true","type":"calico-ipam"}`},
		{"Calico's plugin, dual stack from named pools", `{"type":"calico","ipam":{"type":"calico-ipam","assign_ipv6":"true","ipv4_pools":["default-ipv4-ippool"],"ipv6_pools":["fd00::/48"],"subnet":"usePodCidr"}}`,
			`{"assign_ipv6":"true","ipv4_pools":["default-ipv4-ippool"],"ipv6_pools":["fd00::/48"],"type":"calico-ipam"}`},
		{"Calico's plugin with host-local", `{"type":"calico","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`, `{"subnet":"10.1.0.0/24","type":"host-local"}`},
		{"an IPAM netready cannot count", `{"type":"bridge","ipam":{"type":"dhcp"}}`,
			`ipam "auto": the first plugin of FILE (type "bridge") has IPAM "dhcp", not host-local or calico-ipam, and is none of cilium-cni, aws-cni, ovn-k8s-cni-overlay: netready cannot count its pool, so leave "status.ipam" out (the pool is not watched), or set it to an ipam object that names the source`},
		{"no ipam", `{"type":"ptp"}`,
			`ipam "auto": the first plugin of FILE (type "ptp") has no ipam object and is none of cilium-cni, aws-cni, ovn-k8s-cni-overlay: netready cannot count its pool, so leave "status.ipam" out (the pool is not watched), or set it to an ipam object that names the source`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "10-net.conflist")
			os.WriteFile(path, []byte(`{"cniVersion":"1.1.0","name":"net","plugins":[`+tt.first+`,{"type":"netready"}]}`), 0o644)
			f, err := conflist.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			ipam, err := AutoIPAM(f)
			var got string
			if err != nil {
				got = err.Error()
			} else {
				var v any
				json.Unmarshal(ipam, &v)
				b, _ := json.Marshal(v)
				got = string(b)
				if _, err := New("net", ipam); err != nil {
					t.Errorf("New(%s): %v", ipam, err)
				}
			}
			if diff := cmp.Diff(tt.want, strings.ReplaceAll(got, path, "FILE")); diff != "" {
				t.Errorf("AutoIPAM (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNewSource: each type makes its source, with the contract's
// defaults; a bad object is an error that names it.
func TestNewSource(t *testing.T) {
	tests := []struct {
		ipam, want string // "type where", or the error
	}{
		{`{"type":"host-local","subnet":"10.1.0.0/24","dataDir":"/d"}`, "host-local /d/net"},
		{`{"type":"cilium"}`, "cilium unix:///var/run/cilium/cilium.sock"},
		{`{"type":"cilium","socket":"unix:///run/c.sock"}`, "cilium unix:///run/c.sock"},
		{`{"type":"aws-vpc-cni"}`, "aws-vpc-cni http://127.0.0.1:61679 http://127.0.0.1:61678/metrics"},
		{`{"type":"aws-vpc-cni","url":"http://localhost:1","metrics":"unix:///run/m.sock"}`, "aws-vpc-cni http://localhost:1 unix:///run/m.sock"},
		{`{"type":"aws-vpc-cni","url":"http://10.0.0.1:61679"}`, `status ipam: url "http://10.0.0.1:61679" is not an IP literal on loopback`},
		{`{"type":"calico-ipam"}`, "calico-ipam /run/netready/net/.pool-verdict"},
		{`{"type":"ovn-kubernetes"}`, "ovn-kubernetes /run/netready/net/.pool-verdict"},
		{`{"type":"ovn-kubernetes","socket":"unix:///x.sock"}`, `status ipam: unknown key "socket" (known: type)`},
		{`{"type":"dhcp"}`, `status ipam: netready cannot count a pool of type "dhcp"`},
	}
	for _, tt := range tests {
		src, err := New("net", json.RawMessage(tt.ipam))
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = src.Type() + " " + src.Where()
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("New(%s) (-want +got):\n%s", tt.ipam, diff)
		}
	}
}

// TestCountDescribe: the words of the node condition for each kind of
// count.
func TestCountDescribe(t *testing.T) {
	tests := []struct {
		cnt  Count
		want string
	}{
		{parseCiliumIPAM("IPv4: 14/14 allocated from 10.200.95.0/28, "), "cilium (cilium): 14 of 14 addresses in use in 10.200.95.0/28"},
		{parseCiliumIPAM("IPv4: 2 IPAM pool(s) available, "),
			`cilium (cilium); cannot tell: the Cilium agent's IPv4 status "2 IPAM pool(s) available" has no capacity (multi-pool IPAM, or IPAM delegated to a plugin): netready cannot tell when it runs out`},
		{Count{Ranges: []Range{{Set: "IPv4", Usable: big.NewInt(5), Used: 3, Cooling: 1}}, Grows: true},
			"cilium (cilium): 3 of 5 addresses in use, 1 cooling down; the source can add addresses"},
		{Count{Ranges: []Range{{Set: "IPv4", Usable: big.NewInt(5), Used: 3}, {Set: "IPv6", Usable: big.NewInt(9), Used: 3}}},
			"cilium (cilium): 3 of 5 addresses in use in IPv4, 3 of 9 addresses in use in IPv6"},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.cnt.Describe("cilium", "cilium")); diff != "" {
			t.Errorf("Describe (-want +got):\n%s", diff)
		}
	}
	r, ok := Count{Ranges: []Range{{Set: "a", Usable: big.NewInt(9), Used: 1}, {Set: "b", Usable: big.NewInt(5), Used: 3, Cooling: 1}}}.Tightest()
	if !ok || r.Set != "b" {
		t.Errorf("Tightest = %+v, %v; want b (1 free)", r, ok)
	}
	if _, ok := (Count{}).Tightest(); ok {
		t.Error("Tightest of nothing counted: ok")
	}
}

// calico-ipam's keys are read as Calico's plugin reads them: a value it
// takes is never an error, since STATUS reads them for "auto".
func TestCalicoScopeAsCalicoReadsIt(t *testing.T) {
	for _, tc := range []struct {
		ipam string
		want Scope
	}{
		{`{"type":"calico-ipam"}`, Scope{IPv4: true}},
		{`{"type":"calico-ipam","assign_ipv4":"false","assign_ipv6":"true"}`, Scope{IPv6: true}},
		{`{"type":"calico-ipam","assign_ipv4":"False","assign_ipv6":"yes"}`, Scope{IPv4: true}},
		{`{"type":"calico-ipam","assign_ipv4":"false"}`, Scope{}},
		{`{"type":"calico-ipam","ipv4_pools":["p","10.0.0.0/16"]}`, Scope{IPv4: true, IPv4Pools: []string{"p", "10.0.0.0/16"}}},
	} {
		src, err := New("net", json.RawMessage(tc.ipam))
		if err != nil {
			t.Errorf("%s: %v", tc.ipam, err)
			continue
		}
		if d := cmp.Diff(tc.want, ScopeOf(src)); d != "" {
			t.Errorf("%s: scope (-want +got):\n%s", tc.ipam, d)
		}
	}
	if _, err := New("net", json.RawMessage(`{"type":"calico-ipam","ipv4pools":["p"]}`)); err == nil || !strings.Contains(err.Error(), "ipv4pools") {
		t.Errorf("an unknown key: %v, want an error naming it", err)
	}
}

// TestEveryKindIsAConfigType: the status.ipam types that configuration
// accepts are the kinds of the table, in its order, and each kind's own
// ipam object with nothing but its type (host-local's with a range) is
// valid configuration.
func TestEveryKindIsAConfigType(t *testing.T) {
	var types []string
	for _, k := range kinds {
		types = append(types, fmt.Sprintf("%q", k.typ))
		ipam := fmt.Sprintf(`{"type":%q}`, k.typ)
		if k.typ == config.IPAMHostLocal {
			ipam = `{"type":"host-local","subnet":"10.1.0.0/24"}`
		}
		if _, err := config.Parse([]byte(`{"cniVersion":"1.1.0","name":"n","type":"netready","status":{"ipam":` + ipam + `}}`)); err != nil {
			t.Errorf("kind %s: configuration refuses %s: %v", k.typ, ipam, err)
		}
	}
	_, err := config.Parse([]byte(`{"cniVersion":"1.1.0","name":"n","type":"netready","status":{"ipam":{"type":"no-such-source"}}}`))
	want := `only "type": ` + strings.Join(types[:len(types)-1], ", ") + " or " + types[len(types)-1] + " can be counted"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("an unknown type: %v, want it to say %s", err, want)
	}
}
