package explain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

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

// forbidAllBut makes c refuse, as RBAC would, every read outside
// namespace ns but a get of the pod itself.
func forbidAllBut(c *fake.Clientset, ns string) {
	c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == ns && a.GetResource().Resource == "pods" {
			return false, nil, nil
		}
		gr := a.GetResource().GroupResource()
		return true, nil, apierrors.NewForbidden(gr, "", fmt.Errorf("user tenant cannot %s %s", a.GetVerb(), gr))
	})
}

// TestExplainWithOneNamespacesRights: a developer who may read pods in
// their namespace alone gets their pod explained, and each read refused
// named with what the report lacks for it.
func TestExplainWithOneNamespacesRights(t *testing.T) {
	ready := gatedPod("web", "n1", &corev1.PodCondition{Type: publish.DefaultConditionType, Status: corev1.ConditionTrue, Reason: publish.ReasonProgrammed,
		Message: "network podnet (eth0) programmed after 212 ms", LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))})
	ready.Spec.ReadinessGates[0].ConditionType = publish.DefaultConditionType
	c := cluster(ready)
	forbidAllBut(c, "shop")
	r, err := Pod(context.Background(), c, "shop", "web", Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if !r.NetworkReady || r.NodeState != nil {
		t.Errorf("NetworkReady %v, NodeState %+v; want the pod network-ready, its node unread", r.NetworkReady, r.NodeState)
	}
	var out bytes.Buffer
	r.WriteText(&out)
	for _, w := range []string{
		"pod shop/web on node n1 is network-ready\n",
		"gate:        " + publish.DefaultConditionType + ": added by the admission policy netready-readiness-gate or written in the pod's spec (namespace shop's labels not readable)",
		"network podnet (eth0): programmed 212 ms after ADD began",
		"not read:    could not read netready's DaemonSet or netready-settings in kube-system (forbidden): condition type assumed " + publish.DefaultConditionType,
		"not read:    could not read namespace shop (forbidden)",
		"not read:    could not list Events in shop (forbidden)",
		"not read:    could not read node n1 (forbidden): its runtime network, taint, pools and netready pod are not shown",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("the text lacks %q:\n%s", w, out.String())
		}
	}
	if strings.Contains(out.String(), "no sidecar:") {
		t.Errorf("with netready's pods unread, the report claims none runs:\n%s", out.String())
	}

	// Nodes readable, netready's pods not: the pod's node is shown, and
	// whether a sidecar runs there is not claimed.
	c = cluster(gatedPod("web", "n1", nil))
	c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "shop" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("no"))
	})
	r, err = Pod(context.Background(), c, "shop", "web", Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if r.NodeState == nil || r.NoSidecar != "" || len(r.Unread) != 2 ||
		!strings.HasPrefix(r.Unread[0], "could not list netready's pods in kube-system (forbidden): whether a netready sidecar runs on node n1 is not known") ||
		!strings.HasPrefix(r.Unread[1], "could not list the pods of node n1 (forbidden)") {
		t.Errorf("NodeState %+v, NoSidecar %q, Unread %q", r.NodeState, r.NoSidecar, r.Unread)
	}

	// status is for operators: a refusal fails it.
	c = cluster()
	forbidAllBut(c, "shop")
	if _, err := Nodes(context.Background(), c, Options{}); !apierrors.IsForbidden(err) {
		t.Errorf("Nodes with no right to read nodes: %v, want forbidden", err)
	}
}

// TestExplainNamesANodeWithoutSidecar: a gated pod on a node where no
// netready pod runs (Windows, Fargate, a virtual node) is told that
// nothing will publish its gate.
func TestExplainNamesANodeWithoutSidecar(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{corev1.LabelOSStable: "windows"}, "no netready sidecar runs on node x (a Windows node: netready's DaemonSet runs on Linux nodes only): nothing will publish this gate"},
		{map[string]string{"eks.amazonaws.com/compute-type": "fargate"}, "no netready sidecar runs on node x (an EKS Fargate node"},
		{map[string]string{"type": "virtual-kubelet"}, "no netready sidecar runs on node x (a virtual node (virtual-kubelet)"},
		{nil, "no netready sidecar runs on node x (its DaemonSet's nodeSelector"},
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: tc.labels}}
		r, err := Pod(context.Background(), cluster(node, gatedPod("web", "x", nil)), "shop", "web", Options{Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		r.WriteText(&out)
		if !strings.Contains(out.String(), "\n  no sidecar:  "+tc.want) {
			t.Errorf("%v: the text lacks %q:\n%s", tc.labels, tc.want, out.String())
		}
	}
	// On n1, netready runs: nothing to say.
	r, err := Pod(context.Background(), cluster(gatedPod("web", "n1", nil)), "shop", "web", Options{Now: func() time.Time { return now }})
	if err != nil || r.NoSidecar != "" {
		t.Errorf("on n1: %v, NoSidecar %q", err, r.NoSidecar)
	}
}

// TestNodesListsPodsOnce: past a few nodes, status lists the pods of
// every node in one paginated list, not one list per node, and counts
// each node's waiting pods as the list per node did.
func TestNodesListsPodsOnce(t *testing.T) {
	var objs []runtime.Object
	for i := range 20 {
		name := fmt.Sprintf("m%02d", i)
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, gatedPod("w"+name, name, nil))
	}
	objs = append(objs, gatedPod("w2m03", "m03", nil), gatedPod("unscheduled", "", nil))
	c := cluster(objs...)
	nodes, err := Nodes(context.Background(), c, Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	lists := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "pods" && a.GetNamespace() == "" {
			lists++
		}
	}
	if lists != 1 {
		t.Errorf("%d cluster-wide pod lists, want 1", lists)
	}
	if len(nodes) != 21 {
		t.Fatalf("%d nodes, want 21", len(nodes))
	}
	for _, n := range nodes {
		want := 1
		switch n.Node {
		case "n1":
			want = 0
		case "m03":
			want = 2
		}
		if n.Waiting != want || want > 0 && n.OldestWait != "1m0s" {
			t.Errorf("node %s: %d waiting (oldest %q), want %d", n.Node, n.Waiting, n.OldestWait, want)
		}
	}
}
