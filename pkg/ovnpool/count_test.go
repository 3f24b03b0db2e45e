package ovnpool

import (
	"math/big"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/pool"
)

// TestCount: the node's subnets from either form of node-subnets, less
// what ovnkube reserves, against the distinct addresses of the node's
// pods that have not terminated, in either form of pod-networks. What
// cannot be read cannot tell, naming the annotation.
func TestCount(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase, networks string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Status: corev1.PodStatus{Phase: phase}}
		if networks != "" {
			p.Annotations = map[string]string{PodNetworks: networks}
		}
		return p
	}
	v4 := func(ip string) string {
		return `{"default":{"ip_addresses":["` + ip + `/29"],"mac_address":"0a:58:0a:f4:01:05","gateway_ips":["10.244.1.1"],"ip_address":"` + ip + `/29","gateway_ip":"10.244.1.1"}}`
	}
	r := func(set string, usable int64, used int64) pool.Range {
		return pool.Range{Set: set, Usable: big.NewInt(usable), Used: used}
	}
	type want struct {
		Ranges  []pool.Range
		Unknown string
		Holders string // the start of Said
	}
	tests := []struct {
		name string
		node map[string]string
		pods []*corev1.Pod
		want want
	}{
		{"a /29 less network, gateway, management port and broadcast",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{pod("a", corev1.PodRunning, v4("10.244.1.3")), pod("b", corev1.PodPending, v4("10.244.1.4"))},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 2)}, Holders: "ovn-kubernetes: 2 pods"}},
		{"the older form: a plain string, ip_address alone",
			map[string]string{NodeSubnets: `{"default":"10.244.1.0/29"}`},
			[]*corev1.Pod{pod("a", corev1.PodRunning, `{"default":{"ip_address":"10.244.1.3/29","mac_address":"0a:58:0a:f4:01:03","gateway_ip":"10.244.1.1"}}`)},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 1)}, Holders: "ovn-kubernetes: 1 pods"}},
		{"hybrid overlay takes .3",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`, hybridOverlayMAC: "0a:58:0a:f4:01:03"},
			[]*corev1.Pod{pod("a", corev1.PodRunning, v4("10.244.1.4"))},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 3, 1)}, Holders: "ovn-kubernetes: 1 pods"}},
		{"terminated pods released theirs; a reused address counts once; host-network pods hold none",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{
				pod("done", corev1.PodSucceeded, v4("10.244.1.3")),
				pod("failed", corev1.PodFailed, v4("10.244.1.4")),
				pod("new", corev1.PodRunning, v4("10.244.1.3")),
				pod("dup", corev1.PodRunning, v4("10.244.1.3")),
				pod("host", corev1.PodRunning, ""),
			},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 1)}, Holders: "ovn-kubernetes: 2 pods"}},
		{"dual stack: one range set per family; IPv6 has no broadcast",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29","fd00:10:244:1::/125"]}`},
			[]*corev1.Pod{pod("a", corev1.PodRunning, `{"default":{"ip_addresses":["10.244.1.3/29","fd00:10:244:1::3/125"]}}`)},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 1), r("fd00:10:244:1::/125", 5, 1)}, Holders: "ovn-kubernetes: 1 pods"}},
		{"a /64: ovnkube allocates from its first 65536 addresses",
			map[string]string{NodeSubnets: `{"default":["fd00:10:244:1::/64"]}`},
			nil,
			want{Ranges: []pool.Range{r("fd00:10:244:1::/64", 65533, 0)}, Holders: "ovn-kubernetes: 0 pods"}},
		{"addresses outside the subnet, or reserved, are not the pool's",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{pod("old", corev1.PodRunning, v4("10.244.9.3")), pod("gw", corev1.PodRunning, v4("10.244.1.1")), pod("udn", corev1.PodRunning, `{"ns/blue":{"ip_addresses":["10.100.0.4/24"]}}`)},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 0)}, Holders: "ovn-kubernetes: 0 pods"}},
		{"no annotation", map[string]string{}, nil,
			want{Unknown: "the Node has no k8s.ovn.org/node-subnets annotation: has ovnkube given it a subnet yet?"}},
		{"not JSON", map[string]string{NodeSubnets: `10.244.1.0/24`}, nil,
			want{Unknown: `the Node's k8s.ovn.org/node-subnets annotation "10.244.1.0/24" is not a JSON object: invalid character '.' after top-level value`}},
		{"no default network", map[string]string{NodeSubnets: `{"blue":["10.100.1.0/24"]}`}, nil,
			want{Unknown: `the Node's k8s.ovn.org/node-subnets annotation "{\"blue\":[\"10.100.1.0/24\"]}" has no "default" network`}},
		{"not a CIDR", map[string]string{NodeSubnets: `{"default":["10.244.1.0"]}`}, nil,
			want{Unknown: `the Node's k8s.ovn.org/node-subnets annotation "{\"default\":[\"10.244.1.0\"]}": netip.ParsePrefix("10.244.1.0"): no '/'`}},
		{"a pod's annotation that is not ovnkube's",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{pod("bad", corev1.PodRunning, `{"default":"10.244.1.3"}`)},
			want{Unknown: `pod ns/bad: its k8s.ovn.org/pod-networks annotation "{\"default\":\"10.244.1.3\"}" is not what ovnkube writes`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := count(tt.node, tt.pods)
			got := want{Ranges: c.Ranges, Unknown: c.Unknown}
			if c.Said != "" && tt.want.Holders != "" && len(c.Said) >= len(tt.want.Holders) {
				got.Holders = c.Said[:len(tt.want.Holders)]
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("count (-want +got):\n%s", diff)
			}
			if c.Grows {
				t.Error("an ovn-kubernetes pool grows: ovnkube never adds to a node's subnet")
			}
		})
	}
}

// TestCountExhausted: a /29 with four pods leaves none, and says why,
// naming the source.
func TestCountExhausted(t *testing.T) {
	var pods []*corev1.Pod
	for _, ip := range []string{"10.244.1.3", "10.244.1.4", "10.244.1.5", "10.244.1.6"} {
		pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ip, Annotations: map[string]string{PodNetworks: `{"default":{"ip_addresses":["` + ip + `/29"]}}`}}})
	}
	c := count(map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`}, pods)
	want := "IP pool exhausted (4 of 4 addresses in use): ovn-kubernetes: 4 pods hold addresses in the node's subnet 10.244.1.0/29 (k8s.ovn.org/node-subnets, less the addresses ovnkube reserves)"
	if err := c.Exhausted(1); err == nil || err.Error() != want {
		t.Errorf("Exhausted = %v, want %s", err, want)
	}
	if err := count(map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`}, pods[1:]).Exhausted(1); err != nil {
		t.Errorf("three pods: %v", err)
	}
}
