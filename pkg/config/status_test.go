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
		{"calico-ipam", `{"type":"calico-ipam"}`, ""},
		{"ovn-kubernetes", `{"type":"ovn-kubernetes"}`, ""},

		{"not an object", `7`,
			`"ipam" must be "auto" or an object whose "type" is "host-local", "cilium" or "aws-vpc-cni"`},
		{"no type", `{"socket":"unix:///x.sock"}`,
			`"ipam": "type" is required and must be a string: "host-local", "cilium" or "aws-vpc-cni"`},
		{"an IPAM netready cannot count", `{"type":"dhcp"}`,
			`"ipam": only "type": "host-local", "cilium", "aws-vpc-cni", "calico-ipam" or "ovn-kubernetes" can be counted, got "dhcp"`},
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
