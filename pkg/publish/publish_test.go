package publish

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/marker"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func mk(network, ifName, state string) *marker.Marker {
	m := &marker.Marker{Network: network, IfName: ifName, State: state, WaitedMs: 12, CreatedAt: marker.Time{Time: t0}}
	if state == marker.StatePending {
		m.Checks = []marker.CheckResult{{Kind: "route", Target: "10.1.0.5", Ready: true}, {Kind: "file", Target: "/run/x", Why: "file does not exist (yet)"}}
	}
	return m
}

func TestForMarkers(t *testing.T) {
	tests := []struct {
		name    string
		markers []*marker.Marker
		now     time.Time
		want    corev1.PodCondition
	}{
		{
			name:    "one ready",
			markers: []*marker.Marker{mk("podnet", "eth0", marker.StateReady)},
			now:     t0,
			want:    corev1.PodCondition{Type: "T", Status: corev1.ConditionTrue, Reason: ReasonProgrammed, Message: "network podnet (eth0) programmed after 12 ms"},
		},
		{
			name: "ready across nodes names what it rests on",
			markers: []*marker.Marker{func() *marker.Marker {
				m := mk("podnet", "eth0", marker.StateReady)
				m.Checks = []marker.CheckResult{{Kind: "route", Target: "10.1.0.5", Ready: true},
					{Kind: "ovn-cross-node", Target: "Chassis_Private.nb_cfg >= 7 on 1 of 2 chassis; left out, stalled: b (nb_cfg 5)", Ready: true, Note: "the other nodes have it"}}
				return m
			}(), mk("z-net", "net1", marker.StateReady)},
			now: t0,
			want: corev1.PodCondition{Type: "T", Status: corev1.ConditionTrue, Reason: ReasonProgrammed,
				Message: "network podnet (eth0) programmed after 12 ms (ovn-cross-node Chassis_Private.nb_cfg >= 7 on 1 of 2 chassis, left out, stalled: b (nb_cfg 5): the other nodes have it); network z-net (net1) programmed after 12 ms"},
		},
		{
			name:    "one pending of two, in any order",
			markers: []*marker.Marker{mk("b-net", "net1", marker.StatePending), mk("a-net", "eth0", marker.StateReady)},
			now:     t0,
			want: corev1.PodCondition{Type: "T", Status: corev1.ConditionFalse, Reason: ReasonNotProgrammed,
				Message: "network a-net (eth0) programmed after 12 ms; network b-net (net1): waiting for: file /run/x (file does not exist (yet))"},
		},
		{
			name:    "pending past patience says so, stably",
			markers: []*marker.Marker{mk("podnet", "eth0", marker.StatePending)},
			now:     t0.Add(time.Hour),
			want: corev1.PodCondition{Type: "T", Status: corev1.ConditionFalse, Reason: ReasonNotProgrammed,
				Message: "network podnet (eth0): still not programmed more than 10m0s after ADD (2026-11-23T12:00:00Z), re-checking at least every minute; waiting for: file /run/x (file does not exist (yet))"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ForMarkers(tt.markers, "T", 10*time.Minute, tt.now)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ForMarkers (-want +got):\n%s", diff)
			}
		})
	}
	later := ForMarkers([]*marker.Marker{mk("podnet", "eth0", marker.StatePending)}, "T", 10*time.Minute, t0.Add(2*time.Hour))
	if again := ForMarkers([]*marker.Marker{mk("podnet", "eth0", marker.StatePending)}, "T", 10*time.Minute, t0.Add(time.Hour)); !Shows(&again, later) {
		t.Errorf("a late message changes with time: %q vs %q", again.Message, later.Message)
	}
}

func TestEventFor(t *testing.T) {
	ready := ForMarkers([]*marker.Marker{mk("podnet", "eth0", marker.StateReady)}, "T", time.Minute, t0)
	pend := ForMarkers([]*marker.Marker{mk("podnet", "eth0", marker.StatePending)}, "T", time.Minute, t0)
	late := ForMarkers([]*marker.Marker{mk("podnet", "eth0", marker.StatePending)}, "T", time.Minute, t0.Add(time.Hour))
	unseen := NotObserved("T", true, 30*time.Second)
	tests := []struct {
		name       string
		cur        *corev1.PodCondition
		want       corev1.PodCondition
		wantReason string // "" means no Event
	}{
		// A pod ready at its first condition costs one write, the
		// condition: no Event.
		{"first ready", nil, ready, ""},
		{"pending to ready", &pend, ready, ReasonProgrammed},
		{"ready again", &ready, ready, ""},
		{"first pending", nil, pend, ReasonNotProgrammed},
		{"pending with a new reason", &pend, pend, ""},
		{"pending passes its patience", &pend, late, ReasonNotProgrammed},
		{"late stays late", &late, late, ""},
		{"not observed", nil, unseen, ReasonNotObserved},
		{"host network", nil, HostNetwork("T"), ""},
		{"not observed, then host network", &unseen, HostNetwork("T"), ReasonHostNetwork},
	}
	for _, tt := range tests {
		ev, ok := EventFor(tt.cur, tt.want)
		if (tt.wantReason != "") != ok || ev.Reason != tt.wantReason {
			t.Errorf("%s: EventFor = %+v, %v; want reason %q", tt.name, ev, ok, tt.wantReason)
		}
	}
}

func TestWithTransition(t *testing.T) {
	old := metav1.NewTime(t0)
	cur := &corev1.PodCondition{Status: corev1.ConditionFalse, LastTransitionTime: old}
	same := WithTransition(corev1.PodCondition{Status: corev1.ConditionFalse, Message: "new"}, cur, t0.Add(time.Minute))
	if !same.LastTransitionTime.Equal(&old) {
		t.Errorf("same status moved lastTransitionTime to %v", same.LastTransitionTime)
	}
	flipped := WithTransition(corev1.PodCondition{Status: corev1.ConditionTrue}, cur, t0.Add(time.Minute))
	if !flipped.LastTransitionTime.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("a flip kept lastTransitionTime %v", flipped.LastTransitionTime)
	}
}

func TestPatchCarriesUIDAndOneCondition(t *testing.T) {
	data, err := Patch("u-1", corev1.PodCondition{Type: "T", Status: corev1.ConditionTrue})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct{ UID string } `json:"metadata"`
		Status   struct {
			Conditions []map[string]any `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Metadata.UID != "u-1" || len(got.Status.Conditions) != 1 || got.Status.Conditions[0]["type"] != "T" {
		t.Errorf("patch = %s", data)
	}
	if strings.Contains(string(data), "labels") || strings.Contains(string(data), "spec") {
		t.Errorf("patch touches more than the condition: %s", data)
	}
}

func TestNotObservedModes(t *testing.T) {
	if c := NotObserved("T", true, time.Second); c.Status != corev1.ConditionTrue || c.Reason != ReasonNotObserved {
		t.Errorf("ready mode = %+v", c)
	}
	if c := NotObserved("T", false, time.Second); c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, "--unobserved=notready") {
		t.Errorf("notready mode = %+v", c)
	}
}

// TestNotInEffect: the verdict comes right after the sandbox, so that a
// long message cut at its bound keeps it; IsNotInEffect reads it back,
// and the attachments are still read as ForMarkers names them.
func TestNotInEffect(t *testing.T) {
	m := mk("k8s-pod-network", "eth0", marker.StatePending)
	m.ContainerID = "0123456789abcdef"
	m.Checks[1].Why = "calico preset: /var/run/calico/endpoint-status does not exist; " + strings.Repeat("x", 2000)
	c := NotInEffect([]*marker.Marker{m}, "T", time.Hour, t0, false, []string{"k8s-pod-network"}, time.Minute)
	if c.Status != corev1.ConditionFalse || c.Reason != ReasonNotObserved || len(c.Message) > maxMessage ||
		!strings.HasPrefix(c.Message, "sandbox 0123456789ab; netready is not in effect on this node for network k8s-pod-network: ") ||
		!strings.Contains(c.Message, "1m0s after its ADD began (--not-in-effect-hold-max); keeping it not ready (--unobserved=notready); network k8s-pod-network (eth0): waiting for:") {
		t.Errorf("condition = %+v", c)
	}
	if !IsNotInEffect(&c) || ParseSandbox(c.Message) != "0123456789ab" {
		t.Errorf("IsNotInEffect = %v, ParseSandbox = %q; want true, 0123456789ab", IsNotInEffect(&c), ParseSandbox(c.Message))
	}
	if got := ParseMessage(c.Message); len(got) != 1 || got[0].Network != "k8s-pod-network" || got[0].Programmed {
		t.Errorf("ParseMessage = %+v, want the one pending attachment", got)
	}
	for _, other := range []corev1.PodCondition{NotObserved("T", true, time.Second), ForMarkers([]*marker.Marker{m}, "T", time.Hour, t0)} {
		if IsNotInEffect(&other) {
			t.Errorf("IsNotInEffect(%+v) = true", other)
		}
	}
}
