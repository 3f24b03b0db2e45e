package ovn

import (
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/pool"
)

// testPod is a pod whose status.podIPs kubelet posted as ips.
func testPod(name string, phase corev1.PodPhase, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Status: corev1.PodStatus{Phase: phase}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

// annotated is pod with a k8s.ovn.org/pod-networks annotation, which
// anyone who can patch the pod can write.
func annotated(pod *corev1.Pod, networks string) *corev1.Pod {
	pod.Annotations = map[string]string{PodNetworks: networks}
	return pod
}

// TestCount: the node's subnets from either form of node-subnets, less
// what ovnkube reserves, against the distinct addresses kubelet posted for
// the node's pods that have not terminated, at most one per family per
// pod. A pod's annotations never count; a pod that cannot be read is
// skipped and named; a Node that cannot be read cannot tell, naming the
// annotation.
func TestCount(t *testing.T) {
	r := func(set string, usable int64, used int64) pool.Range {
		return pool.Range{Set: set, Usable: big.NewInt(usable), Used: used}
	}
	// What a tenant writes to taint the node: every address of a /24 in
	// the annotation ovnkube would write, on a pod kubelet never ran.
	var all []string
	for i := 3; i <= 254; i++ {
		all = append(all, fmt.Sprintf(`"10.244.1.%d/24"`, i))
	}
	crafted := `{"default":{"ip_addresses":[` + strings.Join(all, ",") + `],"mac_address":"0a:58:0a:f4:01:05"}}`
	type want struct {
		Ranges  []pool.Range
		Unknown string
		Said    string
		Skipped string
	}
	said := func(holders int, subnets string) string {
		return fmt.Sprintf("ovn-kubernetes: %d pods hold addresses in the node's subnet %s (k8s.ovn.org/node-subnets, less the addresses ovnkube reserves; the pods' status.podIPs)", holders, subnets)
	}
	tests := []struct {
		name string
		node map[string]string
		pods []*corev1.Pod
		want want
	}{
		{"a /29 less network, gateway, management port and broadcast",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{testPod("a", corev1.PodRunning, "10.244.1.3"), testPod("b", corev1.PodPending, "10.244.1.4")},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 2)}, Said: said(2, "10.244.1.0/29")}},
		{"the older form of node-subnets: a plain string",
			map[string]string{NodeSubnets: `{"default":"10.244.1.0/29"}`},
			[]*corev1.Pod{testPod("a", corev1.PodRunning, "10.244.1.3")},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 1)}, Said: said(1, "10.244.1.0/29")}},
		{"status.podIP alone, as an older kubelet posts it",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.3"}}},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 1)}, Said: said(1, "10.244.1.0/29")}},
		{"hybrid overlay takes .3",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`, hybridOverlayMAC: "0a:58:0a:f4:01:03"},
			[]*corev1.Pod{testPod("a", corev1.PodRunning, "10.244.1.4")},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 3, 1)}, Said: said(1, "10.244.1.0/29")}},
		{"terminated pods released theirs; a reused address counts once; pods not yet started hold none",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{
				testPod("done", corev1.PodSucceeded, "10.244.1.3"),
				testPod("failed", corev1.PodFailed, "10.244.1.4"),
				testPod("new", corev1.PodRunning, "10.244.1.3"),
				testPod("dup", corev1.PodRunning, "10.244.1.3"),
				testPod("starting", corev1.PodPending),
			},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 1)}, Said: said(2, "10.244.1.0/29")}},
		{"a host-network pod's addresses are the node's, even inside the subnet",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{func() *corev1.Pod {
				p := testPod("host", corev1.PodRunning, "10.244.1.5")
				p.Spec.HostNetwork = true
				return p
			}()},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 0)}, Said: said(0, "10.244.1.0/29")}},
		{"dual stack: one range set per family; IPv6 has no broadcast",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29","fd00:10:244:1::/125"]}`},
			[]*corev1.Pod{testPod("a", corev1.PodRunning, "10.244.1.3", "fd00:10:244:1::3")},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 1), r("fd00:10:244:1::/125", 5, 1)}, Said: said(1, "10.244.1.0/29, fd00:10:244:1::/125")}},
		{"at most one address per family per pod: the first",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29","fd00:10:244:1::/125"]}`},
			[]*corev1.Pod{testPod("many", corev1.PodRunning, "10.244.1.3", "10.244.1.4", "::ffff:10.244.1.5", "fd00:10:244:1::3", "fd00:10:244:1::4")},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 1), r("fd00:10:244:1::/125", 5, 1)}, Said: said(1, "10.244.1.0/29, fd00:10:244:1::/125")}},
		{"a /64: ovnkube allocates from its first 65536 addresses",
			map[string]string{NodeSubnets: `{"default":["fd00:10:244:1::/64"]}`},
			nil,
			want{Ranges: []pool.Range{r("fd00:10:244:1::/64", 65533, 0)}, Said: said(0, "fd00:10:244:1::/64")}},
		{"addresses outside the subnet, or reserved, are not the pool's",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{testPod("old", corev1.PodRunning, "10.244.9.3"), testPod("gw", corev1.PodRunning, "10.244.1.1"), testPod("bcast", corev1.PodRunning, "10.244.1.7")},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 0)}, Said: said(0, "10.244.1.0/29")}},
		{"a tenant's pod-networks annotation claiming the whole subnet counts nothing",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/24"]}`},
			[]*corev1.Pod{annotated(testPod("crafted", corev1.PodPending), crafted), annotated(testPod("real", corev1.PodRunning, "10.244.1.9"), crafted)},
			want{Ranges: []pool.Range{r("10.244.1.0/24", 252, 1)}, Said: said(1, "10.244.1.0/24")}},
		{"a pod-networks annotation that is not JSON blinds nothing",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{annotated(testPod("bad", corev1.PodRunning, "10.244.1.3"), "not json"), testPod("b", corev1.PodRunning, "10.244.1.4")},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 2)}, Said: said(2, "10.244.1.0/29")}},
		{"a pod whose addresses cannot be read is skipped and named; the rest count",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{testPod("bad", corev1.PodRunning, "10.244.1.x"), testPod("b", corev1.PodRunning, "10.244.1.4")},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 1)},
				Said:    said(1, "10.244.1.0/29") + `; 1 pod skipped, unreadable: pod ns/bad: status.podIPs holds "10.244.1.x", not an IP address`,
				Skipped: `1 pod skipped, unreadable: pod ns/bad: status.podIPs holds "10.244.1.x", not an IP address`}},
		{"many unreadable pods: counted, the first named",
			map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`},
			[]*corev1.Pod{testPod("bad1", corev1.PodRunning, ""), testPod("bad2", corev1.PodRunning, "x"), testPod("bad3", corev1.PodRunning, "10.244.1.3", "y")},
			want{Ranges: []pool.Range{r("10.244.1.0/29", 4, 0)},
				Said:    said(0, "10.244.1.0/29") + `; 3 pods skipped, unreadable: pod ns/bad1: status.podIPs holds "", not an IP address, and 2 more`,
				Skipped: `3 pods skipped, unreadable: pod ns/bad1: status.podIPs holds "", not an IP address, and 2 more`}},
		{"no annotation", map[string]string{}, nil,
			want{Unknown: "the Node has no k8s.ovn.org/node-subnets annotation: has ovnkube given it a subnet yet?"}},
		{"not JSON", map[string]string{NodeSubnets: `10.244.1.0/24`}, nil,
			want{Unknown: `the Node's k8s.ovn.org/node-subnets annotation "10.244.1.0/24" is not a JSON object: invalid character '.' after top-level value`}},
		{"no default network", map[string]string{NodeSubnets: `{"blue":["10.100.1.0/24"]}`}, nil,
			want{Unknown: `the Node's k8s.ovn.org/node-subnets annotation "{\"blue\":[\"10.100.1.0/24\"]}" has no "default" network`}},
		{"not a CIDR", map[string]string{NodeSubnets: `{"default":["10.244.1.0"]}`}, nil,
			want{Unknown: `the Node's k8s.ovn.org/node-subnets annotation "{\"default\":[\"10.244.1.0\"]}": netip.ParsePrefix("10.244.1.0"): no '/'`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, skipped := count(tt.node, tt.pods)
			got := want{Ranges: c.Ranges, Unknown: c.Unknown, Said: c.Said, Skipped: skipped}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("count (-want +got):\n%s", diff)
			}
			if c.Grows {
				t.Error("an ovn-kubernetes pool grows: ovnkube never adds to a node's subnet")
			}
		})
	}
}

// TestCountExhausted: a /29 with four running pods leaves none, and says
// why, naming the source; the same four addresses claimed only in pods'
// annotations leave it with room.
func TestCountExhausted(t *testing.T) {
	node := map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`}
	var pods, claims []*corev1.Pod
	for _, ip := range []string{"10.244.1.3", "10.244.1.4", "10.244.1.5", "10.244.1.6"} {
		pods = append(pods, testPod(ip, corev1.PodRunning, ip))
		claims = append(claims, annotated(testPod("claim-"+ip, corev1.PodPending), `{"default":{"ip_addresses":["`+ip+`/29"]}}`))
	}
	c, _ := count(node, pods)
	want := "IP pool exhausted (4 of 4 addresses in use): ovn-kubernetes: 4 pods hold addresses in the node's subnet 10.244.1.0/29 (k8s.ovn.org/node-subnets, less the addresses ovnkube reserves; the pods' status.podIPs)"
	if err := c.Exhausted(1); err == nil || err.Error() != want {
		t.Errorf("Exhausted = %v, want %s", err, want)
	}
	if c, _ := count(node, pods[1:]); c.Exhausted(1) != nil {
		t.Errorf("three pods: %v", c.Exhausted(1))
	}
	if c, _ := count(node, append(pods[1:], claims...)); c.Exhausted(1) != nil || c.Unknown != "" {
		t.Errorf("three pods and four annotations: %+v, want room", c)
	}
}
