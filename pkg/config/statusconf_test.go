package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
)

// TestStatusIPAMSources: each status.ipam type takes its own keys, and
// the agents' endpoints follow the http checks' rules. A bad one is a
// code 7 error whose message names the key.
func TestStatusIPAMSources(t *testing.T) {
	tests := []struct {
		name string
		ipam string
		want string // the message; "" for a valid entry
	}{
		{"auto", `"auto"`, ""},
		{"host-local", `{"type":"host-local","subnet":"10.1.0.0/24"}`, ""},
		{"cilium with the default socket", `{"type":"cilium"}`, ""},
		{"cilium with a socket", `{"type":"cilium","socket":"unix:///run/cilium/cilium.sock"}`, ""},
		{"aws with the defaults", `{"type":"aws-vpc-cni"}`, ""},
		{"aws with both endpoints", `{"type":"aws-vpc-cni","url":"http://127.0.0.1:61679","metrics":"http://[::1]:61678/metrics"}`, ""},
		{"aws over a socket", `{"type":"aws-vpc-cni","url":"unix:///run/aws/ipamd.sock"}`, ""},
		{"host-local with ranges", `{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]],"dataDir":"/run/ipam","routes":[]}`, ""},
		{"host-local keys in another case, as Go's JSON takes them", `{"type":"host-local","Ranges":[[{"subnet":"10.1.0.0/24"}]],"DataDir":"/run/ipam"}`, ""},
		{"host-local with a key of its own", `{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]],"comment":"from the chain"}`, ""},
		{"calico-ipam", `{"type":"calico-ipam"}`, ""},
		{"calico-ipam with Calico's four keys", `{"type":"calico-ipam","assign_ipv4":"false","assign_ipv6":"true","ipv4_pools":["default-ipv4"],"ipv6_pools":["fd00:10::/64"]}`, ""},
		{"calico-ipam with IPv6 only named", `{"type":"calico-ipam","assign_ipv6":"true"}`, ""},
		{"calico-ipam with a value Calico takes as its default", `{"type":"calico-ipam","assign_ipv4":"no"}`, ""},
		{"ovn-kubernetes", `{"type":"ovn-kubernetes"}`, ""},

		{"not an object", `7`,
			`"ipam" must be "auto" or an object whose "type" is "host-local", "cilium" or "aws-vpc-cni"`},
		{"no type", `{"socket":"unix:///x.sock"}`,
			`"ipam": "type" is required and must be a string: "host-local", "cilium" or "aws-vpc-cni"`},
		{"an IPAM netready cannot count", `{"type":"dhcp"}`,
			`"ipam": only "type": "host-local", "cilium", "aws-vpc-cni", "calico-ipam" or "ovn-kubernetes" can be counted, got "dhcp"`},
		{"host-local without ranges", `{"type":"host-local"}`,
			`"ipam" (type "host-local"): "ranges" is required: the range sets host-local allocates from, as in the chain's host-local, such as [[{"subnet":"10.1.0.0/24"}]] (or the older single "subnet")`},
		{"host-local with no range set", `{"type":"host-local","ranges":[]}`,
			`"ipam" (type "host-local"): "ranges" is required: the range sets host-local allocates from, as in the chain's host-local, such as [[{"subnet":"10.1.0.0/24"}]] (or the older single "subnet")`},
		{"host-local with ranges misspelt", `{"type":"host-local","rnages":[[{"subnet":"10.1.0.0/24"}]]}`,
			`"ipam" (type "host-local"): "ranges" is required: the range sets host-local allocates from, as in the chain's host-local, such as [[{"subnet":"10.1.0.0/24"}]] (or the older single "subnet"); unknown key "rnages": did you mean "ranges"?`},
		{"host-local with dataDir misspelt", `{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]],"dataDri":"/run/ipam"}`,
			`"ipam" (type "host-local"): unknown key "dataDri": did you mean "dataDir"?`},
		{"calico-ipam with a boolean", `{"type":"calico-ipam","assign_ipv6":true}`,
			`"ipam" (type "calico-ipam"): "assign_ipv6" must be a string, not a JSON bool`},
		{"calico-ipam with one pool as a string", `{"type":"calico-ipam","ipv4_pools":"default-ipv4"}`,
			`"ipam" (type "calico-ipam"): "ipv4_pools" must be a []string, not a JSON string`},
		{"calico-ipam with another key", `{"type":"calico-ipam","subnet":"usePodCidr"}`,
			`"ipam" (type "calico-ipam"): unknown key "subnet" (known: type, assign_ipv4, assign_ipv6, ipv4_pools, ipv6_pools)`},
		{"ovn-kubernetes with a key", `{"type":"ovn-kubernetes","socket":"unix:///x.sock"}`,
			`"ipam" (type "ovn-kubernetes"): unknown key "socket" (known: type)`},
		{"cilium over http", `{"type":"cilium","socket":"http://127.0.0.1:9234"}`,
			`"ipam" (type "cilium"): "socket" "http://127.0.0.1:9234" must be unix:///absolute/path.sock: the agent serves its API only on a unix socket`},
		{"cilium relative socket", `{"type":"cilium","socket":"unix://run/cilium.sock"}`,
			`"ipam" (type "cilium"): "socket": "url" "unix://run/cilium.sock" must be unix:///absolute/path.sock`},
		{"cilium with aws's key", `{"type":"cilium","url":"unix:///x.sock"}`,
			`"ipam" (type "cilium"): unknown key "url" (known: type, socket)`},
		{"cilium key in the wrong case", `{"type":"cilium","Socket":"unix:///x.sock"}`,
			`"ipam" (type "cilium"): unknown key "Socket": did you mean "socket"?`},
		{"aws off loopback", `{"type":"aws-vpc-cni","url":"http://10.0.0.1:61679"}`,
			`"ipam" (type "aws-vpc-cni"): "url" "http://10.0.0.1:61679": the host must be an IP literal in 127.0.0.0/8, [::1], or exactly localhost; names are never resolved`},
		{"aws name that looks like loopback", `{"type":"aws-vpc-cni","metrics":"http://127.attacker.example:61678/metrics"}`,
			`"ipam" (type "aws-vpc-cni"): "metrics": "url" "http://127.attacker.example:61678/metrics": the host must be an IP literal in 127.0.0.0/8, [::1], or exactly localhost; names are never resolved`},
		{"aws url with a path", `{"type":"aws-vpc-cni","url":"http://127.0.0.1:61679/v1/enis"}`,
			`"ipam" (type "aws-vpc-cni"): "url" "http://127.0.0.1:61679/v1/enis" is ipamd's introspection address, without a path, such as "http://127.0.0.1:61679"`},
		{"aws with cilium's key", `{"type":"aws-vpc-cni","socket":"unix:///x.sock"}`,
			`"ipam" (type "aws-vpc-cni"): unknown key "socket" (known: type, url, metrics)`},
		{"aws https", `{"type":"aws-vpc-cni","url":"https://127.0.0.1:61679"}`,
			`"ipam" (type "aws-vpc-cni"): "url" "https://127.0.0.1:61679" must start with http:// (loopback) or unix://`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(conf(`"status":{"ipam":` + tt.ipam + `}`))
			got := ""
			if err != nil {
				var e *types.Error
				if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig {
					t.Fatalf("Parse = %v, want a CNI error with code 7", err)
				}
				got = e.Msg
				if got != "" {
					got = trimPrefix(got)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
			if err == nil && tt.ipam != `"auto"` && c.Status.IPAMType() == "" {
				t.Errorf("IPAMType() = \"\" for %s", tt.ipam)
			}
		})
	}
}

// trimPrefix drops what Parse puts before the status block's messages.
func trimPrefix(msg string) string {
	const p = "invalid configuration: status: "
	if i := strings.Index(msg, p); i >= 0 {
		return msg[i+len(p):]
	}
	return msg
}
