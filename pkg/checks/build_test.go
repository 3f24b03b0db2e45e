package checks

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
)

// TestBuild: what each kind builds for an attachment, named as messages
// name it, with whether its probe asks only the kernel; placeholders
// filled, once per pod IP where the kind or a {{.IP}} asks for it, and
// the errors of a check that can never be met.
func TestBuild(t *testing.T) {
	ip := func(cidr, gw string) attachment.IP {
		a, n, err := net.ParseCIDR(cidr)
		if err != nil {
			t.Fatal(err)
		}
		n.IP = a
		return attachment.IP{Address: *n, Gateway: net.ParseIP(gw)}
	}
	att := func(ips ...attachment.IP) *attachment.Attachment {
		return &attachment.Attachment{Network: "podnet", ContainerID: "c1", IfName: "eth0", NetNS: "/run/netns/p",
			Pod: attachment.Pod{Namespace: "ns", Name: "web-0", UID: "u1"}, IPs: ips}
	}
	v4 := att(ip("10.1.0.5/24", "10.1.0.1"))
	dual := att(ip("10.1.0.5/24", "10.1.0.1"), ip("fd00::5/64", ""))
	v6 := att(ip("fd00::5/64", "fd00::1"))
	none := att()
	noPod := att(ip("10.1.0.5/24", ""))
	noPod.Pod = attachment.Pod{}

	tests := []struct {
		name string
		conf config.CheckConf
		att  *attachment.Attachment
		want []string
	}{
		{"address", config.CheckConf{Kind: config.KindAddress}, dual, []string{"address 10.1.0.5 kernel", "address fd00::5 kernel"}},
		{"address, no IP", config.CheckConf{Kind: config.KindAddress}, none, []string{"address (no pod IP) kernel"}},
		{"route", config.CheckConf{Kind: config.KindRoute}, dual, []string{"route 10.1.0.5 kernel", "route fd00::5 kernel"}},
		{"gateway, of the IPs that have one", config.CheckConf{Kind: config.KindGateway}, dual, []string{"gateway 10.1.0.1 kernel"}},
		{"gateway, none in the result", config.CheckConf{Kind: config.KindGateway}, noPod, []string{"error: checks[0] (gateway): can never succeed: the result gives no gateway for any pod IP"}},
		{"gateway, no IP", config.CheckConf{Kind: config.KindGateway}, none, []string{"gateway (no pod IP) kernel"}},
		{"iptables, once", config.CheckConf{Kind: config.KindIPTables, Chain: "FWD", Match: "--comment {{.PodNamespace}}/{{.PodName}}"}, dual,
			[]string{`iptables iptables filter/FWD contains "--comment ns/web-0" agent`}},
		{"iptables, once, IPv6-only pod", config.CheckConf{Kind: config.KindIPTables, Chain: "FWD", Match: "x"}, v6,
			[]string{`iptables ip6tables filter/FWD contains "x" agent`}},
		{"iptables, once, no IP", config.CheckConf{Kind: config.KindIPTables, Chain: "FWD", Match: "x"}, none,
			[]string{`iptables iptables filter/FWD contains "x" agent`}},
		{"iptables, every string expanded", config.CheckConf{Kind: config.KindIPTables, Chain: "POD-{{.ContainerID}}", Match: "x"}, v4,
			[]string{`iptables iptables filter/POD-c1 contains "x" agent`}},
		{"iptables, per IP", config.CheckConf{Kind: config.KindIPTables, Table: "nat", Chain: "FWD", Match: "-s {{.IP}}/32"}, dual,
			[]string{`iptables iptables nat/FWD contains "-s 10.1.0.5/32" agent`, `iptables ip6tables nat/FWD contains "-s fd00::5/32" agent`}},
		{"iptables, per IP, no IP", config.CheckConf{Kind: config.KindIPTables, Chain: "FWD", Match: "-s {{.IP}}"}, none,
			[]string{"iptables (no pod IP) kernel"}},
		{"nftables set, inet", config.CheckConf{Kind: config.KindNFTables, Table: "t-{{.Network}}", Set: "pods"}, dual,
			[]string{"nftables set inet/t-podnet/pods has 10.1.0.5 kernel", "nftables set inet/t-podnet/pods has fd00::5 kernel"}},
		{"nftables set, ip6 of a dual-stack pod", config.CheckConf{Kind: config.KindNFTables, Family: "ip6", Table: "t", Set: "pods"}, dual,
			[]string{"nftables set ip6/t/pods has fd00::5 kernel"}},
		{"nftables set, ip of an IPv6-only pod", config.CheckConf{Kind: config.KindNFTables, Family: "ip", Table: "t", Set: "pods"}, v6,
			[]string{"error: checks[0] (nftables): can never succeed: set ip/t/pods is of family ip, and the pod has no address of that family (it has fd00::5/64)"}},
		{"nftables set, no IP", config.CheckConf{Kind: config.KindNFTables, Table: "t", Set: "pods"}, none,
			[]string{"nftables (no pod IP) kernel"}},
		{"nftables rule, once", config.CheckConf{Kind: config.KindNFTables, Table: "t", Chain: "c-{{.ContainerID}}", Match: "{{.IfName}} accept"}, dual,
			[]string{`nftables chain inet/t/c-c1 contains "eth0 accept" kernel`}},
		{"nftables rule, per IP", config.CheckConf{Kind: config.KindNFTables, Table: "t", Chain: "c", Match: "ip saddr {{.IP}}"}, dual,
			[]string{`nftables chain inet/t/c contains "ip saddr 10.1.0.5" kernel`, `nftables chain inet/t/c contains "ip saddr fd00::5" kernel`}},
		{"file", config.CheckConf{Kind: config.KindFile, Path: "/run/agent/{{.PodUID}}", Contains: "{{.PodName}} up"}, dual,
			[]string{`file /run/agent/u1 contains "web-0 up" kernel`}},
		{"file, per IP", config.CheckConf{Kind: config.KindFile, Path: "/run/agent/{{.IP}}"}, dual,
			[]string{"file /run/agent/10.1.0.5 kernel", "file /run/agent/fd00::5 kernel"}},
		{"file, per IP, no IP", config.CheckConf{Kind: config.KindFile, Path: "/run/agent/{{.IP}}"}, none,
			[]string{"file (no pod IP) kernel"}},
		{"file, not absolute once expanded", config.CheckConf{Kind: config.KindFile, Path: "{{.PodNamespace}}x"}, noPod,
			[]string{`error: checks[0] (file): can never succeed: path "x" is not absolute once expanded`}},
		{"file, calico", config.CheckConf{Kind: config.KindFile, Preset: config.PresetCalico}, v4,
			[]string{"file /var/run/calico/endpoint-status/k8s ns%2Fweb-0 eth0 kernel"}},
		{"file, calico, every string expanded", config.CheckConf{Kind: config.KindFile, Preset: config.PresetCalico, Path: "/run/{{.Network}}/status"}, v4,
			[]string{"file /run/podnet/status/k8s ns%2Fweb-0 eth0 kernel"}},
		{"file, calico, no pod", config.CheckConf{Kind: config.KindFile, Preset: config.PresetCalico}, noPod,
			[]string{`error: checks[0] (file): can never succeed: preset "calico" needs K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS`}},
		{"file, calico, no IP", config.CheckConf{Kind: config.KindFile, Preset: config.PresetCalico}, none,
			[]string{"file /var/run/calico/endpoint-status/k8s ns%2Fweb-0 eth0 kernel"}},
		{"http", config.CheckConf{Kind: config.KindHTTP, URL: "http://127.0.0.1:9099/ready?pod={{.PodName}}"}, dual,
			[]string{"http http://127.0.0.1:9099/ready?pod=web-0 agent"}},
		{"http, unix, per IP", config.CheckConf{Kind: config.KindHTTP, URL: "unix:///run/a.sock", Path: "/ready?ip={{.IP}}"}, dual,
			[]string{"http unix:///run/a.sock /ready?ip=10.1.0.5 agent", "http unix:///run/a.sock /ready?ip=fd00::5 agent"}},
		{"http, not loopback", config.CheckConf{Kind: config.KindHTTP, URL: "http://10.0.0.1/"}, v4,
			[]string{`error: checks[0] (http): can never succeed: url "http://10.0.0.1/" is not an IP literal on loopback`}},
		{"http, cilium", config.CheckConf{Kind: config.KindHTTP, Preset: config.PresetCilium}, dual,
			[]string{"http cilium endpoint cni-attachment-id:c1:eth0 agent"}},
		{"ovsdb", config.CheckConf{Kind: config.KindOVSDB, Preset: config.PresetOVNKubernetes}, dual,
			[]string{"ovsdb ovn-kubernetes Interface sandbox=c1 ovn-installed agent"}},
		{"ovsdb, no IP", config.CheckConf{Kind: config.KindOVSDB, Preset: config.PresetOVNKubernetes}, none,
			[]string{"ovsdb ovn-kubernetes Interface sandbox=c1 ovn-installed agent"}},
	}
	dump := os.Getenv("DUMP") != ""
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.conf.Defaults()
			env := NewEnv(tt.att.NetNS)
			defer env.Close()
			cs, err := Build([]config.CheckConf{tt.conf}, tt.att, env)
			var got []string
			if err != nil {
				got = append(got, "error: "+err.Error())
			}
			for _, c := range cs {
				where := "agent"
				if KernelOnly(c) {
					where = "kernel"
				}
				got = append(got, fmt.Sprintf("%s %s", Describe(c), where))
			}
			if dump {
				fmt.Printf("%q: %#v\n", tt.name, got)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Build (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEveryKindIsBuilt: the kinds configuration accepts are the kinds
// Build knows, one entry each.
func TestEveryKindIsBuilt(t *testing.T) {
	var names []string
	for _, k := range kinds {
		if k.build == nil {
			t.Errorf("kind %q has no build", k.name)
		}
		names = append(names, k.name)
	}
	if diff := cmp.Diff(config.Kinds(), names); diff != "" {
		t.Errorf("kinds (-config +checks):\n%s", diff)
	}
}
