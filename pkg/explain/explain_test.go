package explain

import (
	"bytes"
	"context"
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

	"github.com/netready/netready/pkg/conditions"
	"github.com/netready/netready/pkg/poolwatch"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/pkg/taint"
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
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: taint.Key, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{taint.Condition(true, "podnet: 13 of 13 addresses in use (minFree 1)")}}}
	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web.1"}, EventTime: metav1.NewMicroTime(now.Add(-40 * time.Second)),
		ReportingController: "netready-sidecar", Reason: publish.ReasonNotProgrammed, Type: corev1.EventTypeWarning, Note: "ADD gave up waiting",
		Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web", UID: "u-web"}}
	schedEv := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "big.1"}, EventTime: metav1.NewMicroTime(now.Add(-5 * time.Second)),
		ReportingController: "default-scheduler", Reason: "FailedScheduling", Type: corev1.EventTypeWarning, Note: "0/2 nodes are available: 1 node(s) had untolerated taint(s)",
		Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "big", UID: "u-big"}}
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
		{name: "unscheduled: the tainted node's pool", pod: "big", objs: []runtime.Object{gatedPod("big", "", nil), tainted, schedEv},
			wantText: []string{
				"pod shop/big is not scheduled; netready tainted 1 node(s) whose IP pool is exhausted",
				"scheduling:  0/2 nodes are available: 1 node(s) had untolerated taint(s)",
				"tainted:     n2: runtime network ready; tainted netready.io/pod-ips-exhausted:NoSchedule; NetworkPoolExhausted=True: podnet: 13 of 13 addresses in use (minFree 1)",
				"netready:    no netready pod on n2",
			}},
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
	nodes, err := Nodes(context.Background(), cluster(append(events, waiting, ready, ungated)...), Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeReport{{Node: "n1", RuntimeNetworkReady: true, Netready: &NetreadyPod{Name: "netready-x1", Version: "v0.3.0", Phase: "Running", Ready: true},
		Waiting: 1, OldestWait: "1m0s", Warnings: []Event{
			{Type: "Warning", Reason: "NetreadyPresetNotWriting", Note: "calico preset: /var/run/calico/endpoint-status does not exist", Time: now.Add(-2 * time.Minute), Age: "2m0s"},
			{Type: "Warning", Reason: "NetreadyStatusInactive", Note: "cniVersion 0.3.1", Time: now.Add(-5 * time.Minute), Age: "5m0s"},
		}}}
	if diff := cmp.Diff(want, nodes); diff != "" {
		t.Errorf("Nodes (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	WriteNodesText(&out, nodes)
	if !strings.Contains(out.String(), "n1    netready-x1  v0.3.0   true   false    -     1        1m0s") ||
		!strings.Contains(out.String(), "n1: NetreadyPresetNotWriting (2m0s ago): calico preset: /var/run/calico/endpoint-status does not exist") {
		t.Errorf("status text:\n%s", out.String())
	}
}

// TestConditionTypeFollowsARenamedSettings: under a namePrefix override
// netready-settings is found by its label, as the policies find it.
func TestConditionTypeFollowsARenamedSettings(t *testing.T) {
	renamed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: "acme-netready-settings-x",
		Labels: map[string]string{"netready.io/params": "settings"}}, Data: map[string]string{"conditionType": "example.com/net"}}
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{"renamed, labelled", []runtime.Object{renamed}, "example.com/net"},
		{"by name only (v0.3)", []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: settingsConfigMap}, Data: map[string]string{"conditionType": "example.com/old"}}}, "example.com/old"},
		{"none", nil, publish.DefaultConditionType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := conditionType(context.Background(), fake.NewClientset(tc.objs...), Options{Namespace: DefaultNamespace})
			if err != nil || got != tc.want {
				t.Errorf("conditionType = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestOperatorReasonsAreTheSidecars: the reasons status shows are the
// ones the sidecar records (explain cannot import those packages: the
// client links no netlink).
func TestOperatorReasonsAreTheSidecars(t *testing.T) {
	want := []string{conditions.ReasonPresetNotWriting, poolwatch.ReasonStatusInactive, conditions.ReasonInstallBackedOff, conditions.ReasonInvalidConfig, poolwatch.ReasonPoolUnknown}
	if diff := cmp.Diff(want, operatorReasons); diff != "" {
		t.Errorf("operatorReasons (-want +got):\n%s", diff)
	}
}
