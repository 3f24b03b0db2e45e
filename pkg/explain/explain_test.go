package explain

import (
	"bytes"
	"context"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/pkg/sidecar"
)

const condType = "example.com/net-ready"

var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func gatedPod(name, node string, cond *corev1.PodCondition) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("u-" + name), CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))},
		Spec:       corev1.PodSpec{NodeName: node, ReadinessGates: []corev1.PodReadinessGate{{ConditionType: condType}}},
	}
	if cond != nil {
		p.Status.Conditions = []corev1.PodCondition{*cond}
	}
	return p
}

func cluster(objs ...runtime.Object) *fake.Clientset {
	base := []runtime.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: settingsConfigMap}, Data: map[string]string{"conditionType": condType}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{gateLabel: "enabled"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: "netready-x1", Labels: map[string]string{"app": "netready"}},
			Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "install", Image: "ghcr.io/netready/netready:v0.3.0"}, {Name: "sidecar", Image: "ghcr.io/netready/netready:v0.3.0"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}},
	}
	return fake.NewClientset(append(base, objs...)...)
}

func TestExplainPod(t *testing.T) {
	pendingCond := &corev1.PodCondition{Type: condType, Status: corev1.ConditionFalse, Reason: publish.ReasonNotProgrammed,
		Message:            "network podnet (eth0): waiting for: file /var/run/calico/endpoint-status/k8s shop%2Fweb eth0 (file does not exist (yet))",
		LastTransitionTime: metav1.NewTime(now.Add(-42 * time.Second))}
	readyCond := &corev1.PodCondition{Type: condType, Status: corev1.ConditionTrue, Reason: publish.ReasonProgrammed,
		Message: "network podnet (eth0) programmed after 212 ms", LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}
	tainted := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: nodewriter.Key, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{nodewriter.Condition(true, "podnet: 13 of 13 addresses in use (minFree 1), exhausted")}}}
	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web.1"}, EventTime: metav1.NewMicroTime(now.Add(-40 * time.Second)),
		ReportingController: "netready-sidecar", Reason: publish.ReasonNotProgrammed, Type: corev1.EventTypeWarning, Note: "ADD gave up waiting",
		Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web", UID: "u-web"}}
	ciliumFull := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n3"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: nodewriter.Key, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			nodewriter.Condition(true, "cilium (cilium): 14 of 14 addresses in use in 10.200.95.0/28 (minFree 1), exhausted; podnet: 3 of 13 addresses in use (minFree 1)")}}}
	sandboxEv := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "stuck.1"}, EventTime: metav1.NewMicroTime(now.Add(-3 * time.Second)),
		ReportingController: "kubelet", Reason: reasonSandboxError, Type: corev1.EventTypeWarning,
		Note:      `Failed to create pod sandbox: plugin type="cilium-cni" failed (add): unable to allocate IP via local cilium agent: range is full`,
		Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "stuck", UID: "u-stuck"}}
	schedEv := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "big.1"}, EventTime: metav1.NewMicroTime(now.Add(-5 * time.Second)),
		ReportingController: "default-scheduler", Reason: "FailedScheduling", Type: corev1.EventTypeWarning, Note: "0/2 nodes are available: 1 node(s) had untolerated taint(s)",
		Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "big", UID: "u-big"}}
	// Five tainted nodes: the summary names three pools and counts the rest.
	var crowd []runtime.Object
	for _, name := range []string{"t1", "t2", "t3", "t4", "t5"} {
		crowd = append(crowd, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: nodewriter.Key, Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{nodewriter.Condition(true, "podnet: 5 of 5 addresses in use (minFree 1), exhausted")}}})
	}
	tests := []struct {
		name      string
		pod       string
		objs      []runtime.Object
		wantReady bool
		wantText  []string
	}{
		{name: "pending: the unmet check, network and node", pod: "web", objs: []runtime.Object{gatedPod("web", "n1", pendingCond), ev},
			wantText: []string{
				"pod shop/web on node n1 is NOT network-ready (NetworkNotProgrammed)",
				"gate:        example.com/net-ready: added by the admission policy netready-readiness-gate",
				"condition:   False, NetworkNotProgrammed, since 2026-11-24T11:59:18Z (42s ago)",
				"network podnet (eth0): not programmed; unmet: file /var/run/calico/endpoint-status/k8s shop%2Fweb eth0 (file does not exist (yet))",
				"event:       Warning NetworkNotProgrammed (40s ago): ADD gave up waiting",
				"node:        n1: runtime network ready",
				"netready:    pod netready-x1 (v0.3.0), Running, ready",
			}},
		{name: "ready: with ADD's wait", pod: "web", wantReady: true, objs: []runtime.Object{gatedPod("web", "n1", readyCond)},
			wantText: []string{"pod shop/web on node n1 is network-ready", "network podnet (eth0): programmed 212 ms after ADD began"}},
		{name: "ContainerCreating on a tainted node: the pool, its count, what to do", pod: "stuck", objs: []runtime.Object{gatedPod("stuck", "n3", nil), ciliumFull, sandboxEv},
			wantText: []string{
				"pod shop/stuck on node n3 has no netready condition yet; node n3's IP pool is exhausted: cilium (cilium), 0 of 14 free in 10.200.95.0/28\n",
				"event:       Warning FailedCreatePodSandBox (3s ago): Failed to create pod sandbox",
				"node:        n3: runtime network ready; tainted netready.io/pod-ips-exhausted:NoSchedule",
				"pool:        cilium (cilium) on n3: 0 of 14 free in 10.200.95.0/28 (minFree 1): exhausted\n",
				"to do:       free addresses on n3 (delete pods there that can go); for more per node, a larger per-node pod CIDR (Cilium cluster-pool: clusterPoolIPv4MaskSize",
				"pool:        podnet (host-local) on n3: 10 of 13 free (minFree 1): has room\n",
			}},
		{name: "unscheduled: the tainted node's pool", pod: "big", objs: []runtime.Object{gatedPod("big", "", nil), tainted, schedEv},
			wantText: []string{
				"pod shop/big is not scheduled; netready tainted 1 node(s) whose IP pool is exhausted: n2's podnet (host-local), 0 of 13 free\n",
				"pool:        podnet (host-local) on n2: 0 of 13 free (minFree 1): exhausted\n",
				"to do:       free addresses on n2 (delete pods there that can go), or widen network podnet's host-local ranges in its CNI config on n2\n",
				"scheduling:  0/2 nodes are available: 1 node(s) had untolerated taint(s)",
				"tainted:     n2: runtime network ready; tainted netready.io/pod-ips-exhausted:NoSchedule; NetworkPoolExhausted=True: podnet: 13 of 13 addresses in use (minFree 1), exhausted",
				"netready:    no netready pod on n2",
			}},
		{name: "unscheduled, many tainted nodes: the summary stays short", pod: "big", objs: append(crowd, gatedPod("big", "", nil)),
			wantText: []string{"pod shop/big is not scheduled; netready tainted 5 node(s) whose IP pool is exhausted: " +
				"t1's podnet (host-local), 0 of 5 free; t2's podnet (host-local), 0 of 5 free; t3's podnet (host-local), 0 of 5 free; and 2 more\n",
				"pool:        podnet (host-local) on t5: 0 of 5 free (minFree 1): exhausted\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Pod(context.Background(), cluster(tt.objs...), "shop", tt.pod, Options{Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			if r.NetworkReady != tt.wantReady {
				t.Errorf("NetworkReady = %v, want %v", r.NetworkReady, tt.wantReady)
			}
			var out bytes.Buffer
			r.WriteText(&out)
			for _, w := range tt.wantText {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the text lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestNodes(t *testing.T) {
	waiting := gatedPod("web", "n1", &corev1.PodCondition{Type: condType, Status: corev1.ConditionFalse, Reason: publish.ReasonNotProgrammed})
	ready := gatedPod("ok", "n1", &corev1.PodCondition{Type: condType, Status: corev1.ConditionTrue})
	ungated := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "plain"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	nodeEvent := func(name, controller, reason, note string, ago time.Duration) *eventsv1.Event {
		return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, EventTime: metav1.NewMicroTime(now.Add(-ago)),
			ReportingController: controller, Reason: reason, Type: corev1.EventTypeWarning, Note: note,
			Regarding: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
	}
	events := []runtime.Object{
		nodeEvent("e1", sidecarController, "NetreadyPresetNotWriting", "old", 20*time.Minute),
		nodeEvent("e2", sidecarController, "NetreadyPresetNotWriting", "calico preset: /var/run/calico/endpoint-status does not exist", 2*time.Minute),
		nodeEvent("e3", sidecarController, "NetreadyStatusInactive", "cniVersion 0.3.1", 5*time.Minute),
		nodeEvent("e4", "kubelet", "NetreadyStatusInactive", "not the sidecar's", time.Minute),
		nodeEvent("e5", sidecarController, "PodIPsExhausted", "the taint has its own column", time.Minute),
	}
	pools := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: nodewriter.Key, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			nodewriter.Condition(true, "cilium (cilium): 14 of 14 addresses in use in 10.200.95.0/28 (minFree 1), exhausted; "+
				"aws (aws-vpc-cni): 3 of 5 addresses in use, 1 cooling down; the source can add addresses (minFree 1); "+
				"podnet: 3 of 13 addresses in use in 10.1.0.0/28, 2 of 6 addresses in use in fd00::/125 (minFree 2); "+
				"far (cilium); cannot tell: the Cilium agent: connection refused (minFree 1)")}}}
	nodes, err := Nodes(context.Background(), cluster(append(events, waiting, ready, ungated, pools)...), Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	var n2Pools []Pool
	if len(nodes) == 2 {
		n2Pools, nodes[1].Pools, nodes[1].Pool = nodes[1].Pools, nil, nil // checked below, and the condition as it is
	}
	want := []NodeReport{{Node: "n1", RuntimeNetworkReady: true, Netready: &NetreadyPod{Name: "netready-x1", Version: "v0.3.0", Phase: "Running", Ready: true},
		Waiting: 1, OldestWait: "1m0s", Warnings: []Event{
			{Type: "Warning", Reason: "NetreadyPresetNotWriting", Note: "calico preset: /var/run/calico/endpoint-status does not exist", Time: now.Add(-2 * time.Minute), Age: "2m0s"},
			{Type: "Warning", Reason: "NetreadyStatusInactive", Note: "cniVersion 0.3.1", Time: now.Add(-5 * time.Minute), Age: "5m0s"},
		}}, {Node: "n2", RuntimeNetworkReady: true, Tainted: true}}
	if diff := cmp.Diff(want, nodes); diff != "" {
		t.Errorf("Nodes (-want +got):\n%s", diff)
	}
	b := big.NewInt
	wantPools := []Pool{
		{Line: pool.Line{Network: "cilium", Source: "cilium", MinFree: 1, State: pool.StateExhausted,
			Ranges: []pool.LineRange{{Set: "10.200.95.0/28", Free: b(0), Capacity: b(14), Used: 14}}},
			Do: "free addresses on n2 (delete pods there that can go); for more per node, a larger per-node pod CIDR (Cilium cluster-pool: clusterPoolIPv4MaskSize; " +
				"kubernetes IPAM: kube-controller-manager --node-cidr-mask-size), which nodes get as they join"},
		{Line: pool.Line{Network: "aws", Source: "aws-vpc-cni", MinFree: 1, State: pool.StateGrows,
			Ranges: []pool.LineRange{{Free: b(1), Capacity: b(5), Used: 3, Cooling: 1}}}},
		{Line: pool.Line{Network: "podnet", Source: "host-local", MinFree: 2, State: pool.StateRoom,
			Ranges: []pool.LineRange{{Set: "10.1.0.0/28", Free: b(10), Capacity: b(13), Used: 3}, {Set: "fd00::/125", Free: b(4), Capacity: b(6), Used: 2}}}},
		{Line: pool.Line{Network: "far", Source: "cilium", MinFree: 1, State: pool.StateUnknown, Why: "the Cilium agent: connection refused"}},
	}
	if diff := cmp.Diff(wantPools, n2Pools, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("n2's pools (-want +got):\n%s", diff)
	}
	if len(nodes) == 2 {
		nodes[1].Pools = n2Pools
	}
	var out bytes.Buffer
	WriteNodesText(&out, nodes)
	wantText := `NODE  NETREADY     VERSION  READY  TAINTED  WAITING  OLDEST
n1    netready-x1  v0.3.0   true   false    1        1m0s
n2    -            -        -      true     0        -

NODE  NETWORK  SOURCE       FREE                                                     MINFREE  POOL
n2    cilium   cilium       0 of 14 free in 10.200.95.0/28                           1        exhausted
n2    aws      aws-vpc-cni  1 of 5 free (1 cooling down)                             1        can grow (the source adds addresses)
n2    podnet   host-local   10 of 13 free in 10.1.0.0/28, 4 of 6 free in fd00::/125  2        has room
n2    far      cilium       -                                                        1        can't tell, so it taints nothing: the Cilium agent: connection refused
n1: NetreadyPresetNotWriting (2m0s ago): calico preset: /var/run/calico/endpoint-status does not exist
n1: NetreadyStatusInactive (5m0s ago): cniVersion 0.3.1
`
	if diff := cmp.Diff(wantText, out.String()); diff != "" {
		t.Errorf("status text (-want +got):\n%s", diff)
	}
}

// TestOperatorReasonsAreTheSidecars: the reasons status shows are the
// ones the sidecar records (explain cannot import those packages: the
// client links no netlink).
func TestOperatorReasonsAreTheSidecars(t *testing.T) {
	want := []string{nodewriter.ReasonPresetNotWriting, nodewriter.ReasonStatusInactive, nodewriter.ReasonInstallBackedOff, nodewriter.ReasonInvalidConfig, nodewriter.ReasonPoolUnknown, sidecar.ReasonScopeUnknown}
	if diff := cmp.Diff(want, operatorReasons); diff != "" {
		t.Errorf("operatorReasons (-want +got):\n%s", diff)
	}
}

// TestPoolsOf: the pools a node's condition names, with what to do about
// an exhausted one; a sidecar that marks none (before v0.5) but tainted
// the node has its short pools read as exhausted by their counts.
func TestPoolsOf(t *testing.T) {
	hostLocalDo := "free addresses on n1 (delete pods there that can go), or widen network a's host-local ranges in its CNI config on n1"
	tests := []struct {
		name   string
		status string
		msg    string
		want   []string // network state do
	}{
		{"marked", "True", "a: 5 of 5 addresses in use (minFree 1), exhausted; b: 1 of 5 addresses in use (minFree 1)",
			[]string{"a exhausted " + hostLocalDo, "b room "}},
		{"not marked, tainted: by the counts", "True", "a: 5 of 5 addresses in use (minFree 1); b: 1 of 5 addresses in use (minFree 1)",
			[]string{"a exhausted " + hostLocalDo, "b room "}},
		{"not marked, not tainted", "False", "a: 5 of 5 addresses in use (minFree 1)", []string{"a room "}},
		{"can't tell stays can't tell on a tainted node", "True", "a (cilium); cannot tell: the Cilium agent: refused (minFree 1)", []string{"a unknown "}},
		{"the sources' advice", "True", "a (aws-vpc-cni): 2 of 2 addresses in use (minFree 1), exhausted; b (calico-ipam): 64 of 64 addresses in use (minFree 1), exhausted; " +
			"c (ovn-kubernetes): 253 of 253 addresses in use (minFree 1), exhausted; d (acme): 1 of 1 addresses in use (minFree 1), exhausted",
			[]string{
				"a exhausted free addresses on n1 (delete pods there that can go); ipamd is at the node's limit or the subnet is out of addresses: enable prefix delegation (ENABLE_PREFIX_DELEGATION), use an instance type with more addresses, or a subnet with free ones",
				"b exhausted free addresses on n1 (delete pods there that can go), or let the node claim more blocks: raise the IPAMConfig's maxBlocksPerHost, or add an IPPool with free blocks",
				"c exhausted free addresses on n1 (delete pods there that can go); for more per node, a larger host subnet (the host prefix of ovn-kubernetes' cluster subnets), which nodes get as they join",
				"d exhausted free addresses on n1 (delete pods there that can go), or give the node a larger pool in acme's configuration",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range poolsOf("n1", &Condition{Status: tt.status, Message: tt.msg}) {
				got = append(got, p.Network+" "+p.State+" "+p.Do)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("poolsOf (-want +got):\n%s", diff)
			}
		})
	}
	if got := poolsOf("n1", nil); got != nil {
		t.Errorf("poolsOf(nil) = %+v", got)
	}
}

// A source still syncing holds the taint as it was: explain must not say
// that it taints nothing.
func TestPoolStateWhileSyncing(t *testing.T) {
	for _, tc := range []struct{ why, want string }{
		{"ovn-kubernetes has not counted yet (the Node has not been read yet): " + pool.HeldMark, "can't tell yet, so the taint stays as it was: "},
		{"the Cilium agent: connection refused", "can't tell, so it taints nothing: "},
	} {
		p := Pool{Line: pool.Line{State: pool.StateUnknown, Why: tc.why}}
		if got := p.stateText(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("stateText(%q) = %q, want it to begin %q", tc.why, got, tc.want)
		}
	}
}
