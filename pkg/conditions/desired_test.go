package conditions

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/publish"
)

// TestJudge: the condition of one pod from its markers, its status and the
// time; above all, a True never outlives the sandbox that earned it.
func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	o := judgeOptions{CondType: "T", PendingTimeout: 10 * time.Minute, UnobservedGrace: 30 * time.Second, UnobservedReady: true}
	mk := func(cid, ifName, ip, state string, created time.Time) *marker.Marker {
		m := &marker.Marker{Network: "podnet", ContainerID: cid, IfName: ifName, IPs: []string{ip + "/24"}, State: state,
			CreatedAt: marker.Time{Time: created}, WaitedMs: 5}
		if state == marker.StatePending {
			m.Checks = []marker.CheckResult{{Kind: "file", Target: "/x", Why: "not yet"}}
		}
		return m
	}
	prtsc := func(s corev1.ConditionStatus, at time.Time) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: s, LastTransitionTime: metav1.NewTime(at)}
	}
	earned := corev1.PodCondition{Type: "T", Status: corev1.ConditionTrue, Reason: publish.ReasonProgrammed,
		Message: "sandbox aaaaaaaaaaaa; network podnet (eth0) programmed after 5 ms"}
	pod := func(ip string, conds ...corev1.PodCondition) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Conditions: conds}}
		if ip != "" {
			p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		}
		return p
	}
	sandboxChanged := func(stale ...string) judgement {
		return judgement{Cond: publish.SandboxChanged("T", "aaaaaaaaaaaa", stale), Publish: true}
	}
	oldSandbox := "aaaaaaaaaaaa-old-sandbox"
	newSandbox := "bbbbbbbbbbbb-new-sandbox"
	tests := []struct {
		name    string
		pod     *corev1.Pod
		markers []*marker.Marker
		want    judgement
	}{
		{"ready marker of the running sandbox", pod("10.1.0.5", prtsc(corev1.ConditionTrue, t0.Add(time.Second))),
			[]*marker.Marker{mk(oldSandbox, "eth0", "10.1.0.5", marker.StateReady, t0)},
			judgement{Cond: corev1.PodCondition{Type: "T", Status: corev1.ConditionTrue, Reason: publish.ReasonProgrammed,
				Message: "sandbox aaaaaaaaaaaa; network podnet (eth0) programmed after 5 ms"}, Publish: true}},
		{"first sandbox: kubelet's False of the same second as the ADD", pod("", prtsc(corev1.ConditionFalse, t0)),
			[]*marker.Marker{mk(oldSandbox, "eth0", "10.1.0.5", marker.StateReady, t0.Add(400*time.Millisecond))},
			judgement{Cond: corev1.PodCondition{Type: "T", Status: corev1.ConditionTrue, Reason: publish.ReasonProgrammed,
				Message: "sandbox aaaaaaaaaaaa; network podnet (eth0) programmed after 5 ms"}, Publish: true}},
		{"marker removed (DEL), sandbox being recreated", pod("10.1.0.5", prtsc(corev1.ConditionFalse, t0.Add(time.Minute)), earned),
			nil, sandboxChanged()},
		{"marker removed, new sandbox up within the grace", pod("10.1.0.9", prtsc(corev1.ConditionTrue, now.Add(-10*time.Second)), earned),
			nil, judgement{Cond: publish.SandboxChanged("T", "aaaaaaaaaaaa", nil), Publish: true, After: 20 * time.Second}},
		{"marker removed, new sandbox up past the grace: not observed", pod("10.1.0.9", prtsc(corev1.ConditionTrue, now.Add(-time.Minute)), earned),
			nil, judgement{Cond: publish.NotObserved("T", true, 30*time.Second), Publish: true}},
		{"old marker left, the sandbox went down after its ADD", pod("10.1.0.5", prtsc(corev1.ConditionFalse, t0.Add(time.Minute)), earned),
			[]*marker.Marker{mk(oldSandbox, "eth0", "10.1.0.5", marker.StateReady, t0)}, sandboxChanged("aaaaaaaaaaaa_eth0")},
		{"old marker left, a new sandbox with another IP and no marker yet", pod("10.1.0.9", prtsc(corev1.ConditionTrue, now.Add(-time.Second)), earned),
			[]*marker.Marker{mk(oldSandbox, "eth0", "10.1.0.5", marker.StateReady, t0)},
			judgement{Cond: publish.SandboxChanged("T", "aaaaaaaaaaaa", []string{"aaaaaaaaaaaa_eth0"}), Publish: true, After: 29 * time.Second}},
		{"a kubelet without PodReadyToStartContainers: the pod IP is another sandbox's", func() *corev1.Pod {
			p := pod("10.1.0.9", earned)
			p.Status.StartTime = &metav1.Time{Time: now.Add(-time.Second)}
			return p
		}(), []*marker.Marker{mk(oldSandbox, "eth0", "10.1.0.5", marker.StateReady, t0)},
			judgement{Cond: publish.SandboxChanged("T", "aaaaaaaaaaaa", []string{"aaaaaaaaaaaa_eth0"}), Publish: true, After: 29 * time.Second}},
		{"old and new sandbox's markers: the new one counts", pod("10.1.0.9", prtsc(corev1.ConditionTrue, now.Add(-time.Second)), earned),
			[]*marker.Marker{mk(oldSandbox, "eth0", "10.1.0.5", marker.StateReady, t0), mk(newSandbox, "eth0", "10.1.0.9", marker.StatePending, now.Add(-2*time.Second))},
			judgement{Cond: publish.ForMarkers([]*marker.Marker{mk(newSandbox, "eth0", "10.1.0.9", marker.StatePending, now.Add(-2*time.Second))}, "T", 10*time.Minute, now), Publish: true}},
		{"a secondary network's marker holds no pod IP: its primary's does", pod("10.1.0.5", prtsc(corev1.ConditionTrue, t0.Add(time.Second))),
			[]*marker.Marker{mk(oldSandbox, "eth0", "10.1.0.5", marker.StateReady, t0), mk(oldSandbox, "net1", "192.168.7.5", marker.StateReady, t0)},
			judgement{Cond: publish.ForMarkers([]*marker.Marker{mk(oldSandbox, "eth0", "10.1.0.5", marker.StateReady, t0), mk(oldSandbox, "net1", "192.168.7.5", marker.StateReady, t0)}, "T", 10*time.Minute, now), Publish: true}},
		{"terminating, marker removed: no write", func() *corev1.Pod {
			p := pod("10.1.0.5", prtsc(corev1.ConditionTrue, t0), earned)
			p.DeletionTimestamp = &metav1.Time{Time: now}
			return p
		}(), nil, judgement{}},
		{"succeeded, marker removed: no write", func() *corev1.Pod {
			p := pod("10.1.0.5", prtsc(corev1.ConditionFalse, now), earned)
			p.Status.Phase = corev1.PodSucceeded
			return p
		}(), nil, judgement{}},
		{"not observed True is not a sandbox's: no change while recreated", pod("10.1.0.5", prtsc(corev1.ConditionFalse, now),
			publish.NotObserved("T", true, 30*time.Second)), nil, judgement{}},
		{"nothing yet", pod("", prtsc(corev1.ConditionFalse, now)), nil, judgement{}},
		{"host network", &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}}, nil, judgement{Cond: publish.HostNetwork("T"), Publish: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judge(tt.pod, podView{Markers: tt.markers}, o, now)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
}
