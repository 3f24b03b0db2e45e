package conditions

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/nodewriter"
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
		// Looked at again once kubelet has surely reported the sandbox.
		return judgement{Cond: publish.SandboxChanged("T", "aaaaaaaaaaaa", stale), Publish: true, After: 31 * time.Second}
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
		{"marker removed before kubelet reports the sandbox down: SandboxChanged, not not observed", func() *corev1.Pod {
			won := earned
			won.LastTransitionTime = metav1.NewTime(t0.Add(time.Second))
			return pod("10.1.0.5", prtsc(corev1.ConditionTrue, t0), won)
		}(), nil, sandboxChanged()},
		{"SandboxChanged, kubelet still behind: no write, looked at again when it may no longer be", func() *corev1.Pod {
			gone := publish.SandboxChanged("T", "aaaaaaaaaaaa", nil)
			gone.LastTransitionTime = metav1.NewTime(now.Add(-5 * time.Second))
			return pod("10.1.0.5", prtsc(corev1.ConditionTrue, t0), gone)
		}(), nil, judgement{After: 26 * time.Second}},
		{"SandboxChanged, kubelet still shows that sandbox past the grace: judged as not observed", func() *corev1.Pod {
			gone := publish.SandboxChanged("T", "aaaaaaaaaaaa", nil)
			gone.LastTransitionTime = metav1.NewTime(now.Add(-time.Minute))
			return pod("10.1.0.5", prtsc(corev1.ConditionTrue, t0), gone)
		}(), nil, judgement{Cond: publish.NotObserved("T", true, 30*time.Second), Publish: true}},
		{"restartPolicy Never, a container created, marker removed: no write while kubelet's phase may end it", func() *corev1.Pod {
			p := pod("10.1.0.5", prtsc(corev1.ConditionTrue, t0), earned)
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "job", ContainerID: "containerd://c1", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			return p
		}(), nil, judgement{After: 31 * time.Second, EndWait: true}},
		{"restartPolicy Never, no container created yet, marker removed: kubelet makes another sandbox", func() *corev1.Pod {
			p := pod("10.1.0.5", prtsc(corev1.ConditionFalse, now), earned)
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "job", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
			return p
		}(), nil, sandboxChanged()},
		{"restartPolicy OnFailure, a container created, marker removed: a new sandbox may come", func() *corev1.Pod {
			p := pod("10.1.0.5", prtsc(corev1.ConditionFalse, now), earned)
			p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "job", ContainerID: "containerd://c1", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			return p
		}(), nil, sandboxChanged()},
		{"not observed True is not a sandbox's: no change while recreated", pod("10.1.0.5", prtsc(corev1.ConditionFalse, now),
			publish.NotObserved("T", true, 30*time.Second)), nil, judgement{}},
		{"nothing yet", pod("", prtsc(corev1.ConditionFalse, now)), nil, judgement{}},
		{"host network", &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}}, nil, judgement{Cond: publish.HostNetwork("T"), Publish: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := remembered(tt.pod, "T")
			if mem.Judged == "aaaaaaaaaaaa" {
				mem.JudgedIPs = []string{"10.1.0.5"} // oldSandbox's, as its markers had
			}
			got := judge(tt.pod, podView{Markers: tt.markers, Memory: mem}, o, now)
			if diff := cmp.Diff(tt.want, got, ignoreMemory); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJudgeInstallBackoff: while the installer backs off, a pod with no
// marker whose sandbox came up since is held not ready, for a bounded
// time; a pod that came up before, or that shows True, is not touched.
func TestJudgeInstallBackoff(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	noted := now.Add(-10*time.Minute + 300*time.Millisecond) // the note file's time
	const why = "netready-install stops putting it back"
	o := judgeOptions{CondType: "T", PendingTimeout: 10 * time.Minute, UnobservedGrace: 30 * time.Second, UnobservedReady: true,
		Backoffs: []nodewriter.Backoff{{Msg: why, Since: noted}}, HoldMax: 15 * time.Minute}
	upSince := func(at time.Time, conds ...corev1.PodCondition) *corev1.Pod {
		conds = append(conds, corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)})
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: conds, PodIP: "10.1.0.5", PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}}}}
	}
	unseen := publish.NotObserved("T", true, 30*time.Second)
	held := publish.NotObservedHeld("T", why)
	tests := []struct {
		name string
		pod  *corev1.Pod
		edit func(*judgeOptions)
		want judgement
	}{
		{"True for days when the note appears: stays True", upSince(now.Add(-48*time.Hour), unseen), nil,
			judgement{Cond: unseen, Publish: true}},
		{"up before the note, not judged yet: not held", upSince(noted.Add(-time.Second)), nil,
			judgement{Cond: unseen, Publish: true}},
		{"up after the note: held until the bound", upSince(now.Add(-time.Minute)), nil,
			judgement{Cond: held, Publish: true, After: 14 * time.Minute}},
		{"up in the note's second: held", upSince(noted.Truncate(time.Second)), nil,
			judgement{Cond: held, Publish: true, After: 5 * time.Minute}},
		{"held, and still held", upSince(now.Add(-time.Minute), held), nil,
			judgement{Cond: held, Publish: true, After: 14 * time.Minute}},
		{"True since after the note: never turned False", upSince(now.Add(-time.Minute), unseen), nil,
			judgement{Cond: unseen, Publish: true}},
		{"held past the bound: released, naming the backoff", upSince(now.Add(-16*time.Minute).Add(time.Second), held), func(o *judgeOptions) {
			o.Backoffs[0].Since = now.Add(-20 * time.Minute)
		}, judgement{Cond: unseen, Publish: true, Released: why}},
		{"released as --unobserved says", upSince(now.Add(-16*time.Minute), held), func(o *judgeOptions) {
			o.Backoffs[0].Since, o.UnobservedReady = now.Add(-20*time.Minute), false
		}, judgement{Cond: publish.NotObserved("T", false, 30*time.Second), Publish: true, Released: why}},
		{"no bound set: nothing held", upSince(now.Add(-time.Minute)), func(o *judgeOptions) { o.HoldMax = 0 },
			judgement{Cond: unseen, Publish: true}},
		{"the earliest backoff that began before the sandbox holds it", upSince(now.Add(-time.Minute)), func(o *judgeOptions) {
			o.Backoffs = []nodewriter.Backoff{{Msg: "earlier", Since: now.Add(-time.Hour)}, {Msg: why, Since: noted}}
		}, judgement{Cond: publish.NotObservedHeld("T", "earlier"), Publish: true, After: 14 * time.Minute}},
		{"within the grace: not judged yet", upSince(now.Add(-10 * time.Second)), nil, judgement{After: 20 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := o
			o.Backoffs = slices.Clone(o.Backoffs)
			if tt.edit != nil {
				tt.edit(&o)
			}
			got := judge(tt.pod, podView{Memory: remembered(tt.pod, "T")}, o, now)
			if diff := cmp.Diff(tt.want, got, ignoreMemory); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJudgeNewSandboxWithTheOldIP: netready was out of the chain, so DEL
// left the old sandbox's ready marker and the new sandbox's ADD wrote
// none; the new sandbox has the same IP. Once the pod's condition says the
// old sandbox is gone, its marker never earns True again.
func TestJudgeNewSandboxWithTheOldIP(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	o := judgeOptions{CondType: "T", PendingTimeout: 10 * time.Minute, UnobservedGrace: 30 * time.Second, UnobservedReady: false}
	ready := func(cid string, created time.Time) *marker.Marker {
		return &marker.Marker{Network: "podnet", ContainerID: cid, IfName: "eth0", IPs: []string{"10.1.0.5/24"}, State: marker.StateReady,
			CreatedAt: marker.Time{Time: created}, WaitedMs: 5}
	}
	old := ready("aaaaaaaaaaaa-old-sandbox", t0)
	fresh := ready("bbbbbbbbbbbb-new-sandbox", now.Add(-5*time.Second))
	pod := func(prtsc corev1.ConditionStatus, at time.Time, cur corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.1.0.5", PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}}, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: prtsc, LastTransitionTime: metav1.NewTime(at)}, cur}}}
	}
	earned := publish.ForMarkers([]*marker.Marker{old}, "T", 10*time.Minute, now)
	gone := publish.SandboxChanged("T", "aaaaaaaaaaaa", []string{"aaaaaaaaaaaa_eth0"})
	goneNoList := publish.SandboxChanged("T", "aaaaaaaaaaaa", nil)
	unseen := publish.LeftBehind(publish.NotObserved("T", false, 30*time.Second), []string{"aaaaaaaaaaaa_eth0"})
	tests := []struct {
		name    string
		pod     *corev1.Pod
		markers []*marker.Marker
		want    judgement
	}{
		{"the old sandbox went down: SandboxChanged naming its marker", pod(corev1.ConditionFalse, now.Add(-time.Minute), earned),
			[]*marker.Marker{old}, judgement{Cond: gone, Publish: true, After: 31 * time.Second}},
		{"the new sandbox is up with the same IP: no True from the old marker", pod(corev1.ConditionTrue, now.Add(-10*time.Second), gone),
			[]*marker.Marker{old}, judgement{After: 20 * time.Second}},
		{"a condition naming the sandbox alone is enough", pod(corev1.ConditionTrue, now.Add(-10*time.Second), goneNoList),
			[]*marker.Marker{old}, judgement{After: 20 * time.Second}},
		{"past the grace: not observed, still naming the old marker", pod(corev1.ConditionTrue, now.Add(-time.Minute), gone),
			[]*marker.Marker{old}, judgement{Cond: unseen, Publish: true}},
		{"not observed, and stays so", pod(corev1.ConditionTrue, now.Add(-time.Minute), unseen),
			[]*marker.Marker{old}, judgement{Cond: unseen, Publish: true}},
		{"the new sandbox's own marker counts", pod(corev1.ConditionTrue, now.Add(-time.Minute), unseen),
			[]*marker.Marker{old, fresh}, judgement{Cond: publish.ForMarkers([]*marker.Marker{fresh}, "T", 10*time.Minute, now), Publish: true}},
		{"a marker of another sandbox than the gone one counts", pod(corev1.ConditionTrue, now.Add(-time.Minute), gone),
			[]*marker.Marker{fresh}, judgement{Cond: publish.ForMarkers([]*marker.Marker{fresh}, "T", 10*time.Minute, now), Publish: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judge(tt.pod, podView{Markers: tt.markers, Memory: remembered(tt.pod, "T")}, o, now)
			if diff := cmp.Diff(tt.want, got, ignoreMemory); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJudgeNotInEffect: a pod whose every pending marker waits on a preset
// whose agent never wrote on this node is judged as an unobserved pod
// HoldMax after its ADD began, as --unobserved says, and keeps that while
// its sandbox's markers stay pending; a pending check that can tell
// decides, and a ready pod is Programmed.
func TestJudgeNotInEffect(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	o := judgeOptions{CondType: "T", PendingTimeout: 10 * time.Minute, UnobservedGrace: 30 * time.Second, UnobservedReady: true, HoldMax: time.Minute}
	const why = "calico preset: /var/run/calico/endpoint-status does not exist; set endpointStatusPathPrefix in FelixConfiguration (to /var/run/calico)"
	mk := func(network, ifName, state string, created time.Time) *marker.Marker {
		m := &marker.Marker{Network: network, ContainerID: "aaaaaaaaaaaa-sandbox", IfName: ifName, IPs: []string{"10.1.0.5/24"}, State: state,
			CreatedAt: marker.Time{Time: created}, WaitedMs: 5}
		if state == marker.StatePending {
			m.Checks = []marker.CheckResult{{Kind: "file", Target: "/var/run/calico/endpoint-status/k8s default%2Fweb eth0", Why: why}}
		}
		return m
	}
	silent := mk("k8s-pod-network", "eth0", marker.StatePending, now.Add(-61*time.Second))
	young := mk("k8s-pod-network", "eth0", marker.StatePending, now.Add(-20*time.Second))
	telling := mk("storagenet", "net1", marker.StatePending, now.Add(-61*time.Second))
	telling.Checks = []marker.CheckResult{{Kind: "nftables", Target: "set inet/agent/pods4 has 10.1.0.5", Why: "IP not in the set yet"}}
	ready := mk("storagenet", "net1", marker.StateReady, now.Add(-61*time.Second))
	pod := func(conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: conds}}
	}
	released := func(ms []*marker.Marker, ready bool) corev1.PodCondition {
		return publish.NotInEffect(ms, "T", 10*time.Minute, now, ready, []string{"k8s-pod-network"}, time.Minute)
	}
	pending := func(ms ...*marker.Marker) corev1.PodCondition {
		return publish.ForMarkers(ms, "T", 10*time.Minute, now)
	}
	tests := []struct {
		name       string
		pod        *corev1.Pod
		markers    []*marker.Marker
		neverWrote []*marker.Marker
		edit       func(*judgeOptions)
		want       judgement
	}{
		{"within the bound: pending, judged again at its end", pod(), []*marker.Marker{young}, []*marker.Marker{young}, nil,
			judgement{Cond: pending(young), Publish: true, After: 40 * time.Second}},
		{"past the bound: judged as not observed, --unobserved=ready", pod(), []*marker.Marker{silent}, []*marker.Marker{silent}, nil,
			judgement{Cond: released([]*marker.Marker{silent}, true), Publish: true}},
		{"past the bound, --unobserved=notready: False", pod(), []*marker.Marker{silent}, []*marker.Marker{silent},
			func(o *judgeOptions) { o.UnobservedReady = false },
			judgement{Cond: released([]*marker.Marker{silent}, false), Publish: true}},
		{"no hold: at once", pod(), []*marker.Marker{young}, []*marker.Marker{young}, func(o *judgeOptions) { o.HoldMax = 0 },
			judgement{Cond: publish.NotInEffect([]*marker.Marker{young}, "T", 10*time.Minute, now, true, []string{"k8s-pod-network"}, 0), Publish: true}},
		{"the preset worked on this node (no fresh never-wrote): pending for good", pod(), []*marker.Marker{silent}, nil, nil,
			judgement{Cond: pending(silent), Publish: true}},
		{"another network's pending check can tell: it decides", pod(), []*marker.Marker{silent, telling}, []*marker.Marker{silent}, nil,
			judgement{Cond: pending(silent, telling), Publish: true}},
		{"another network ready: judged as not observed", pod(), []*marker.Marker{silent, ready}, []*marker.Marker{silent}, nil,
			judgement{Cond: released([]*marker.Marker{silent, ready}, true), Publish: true}},
		{"judged so, and the agent writes now: kept while pending", pod(released([]*marker.Marker{silent}, true)), []*marker.Marker{silent}, nil, nil,
			judgement{Cond: released([]*marker.Marker{silent}, true), Publish: true}},
		{"judged so, and the marker turns ready: programmed", pod(released([]*marker.Marker{silent}, true)),
			[]*marker.Marker{mk("k8s-pod-network", "eth0", marker.StateReady, now.Add(-61*time.Second))}, nil, nil,
			judgement{Cond: pending(mk("k8s-pod-network", "eth0", marker.StateReady, now.Add(-61*time.Second))), Publish: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := o
			if tt.edit != nil {
				tt.edit(&o)
			}
			v := podView{Markers: tt.markers, NeverWrote: map[*marker.Marker]string{}, Memory: remembered(tt.pod, "T")}
			for _, m := range tt.neverWrote {
				v.NeverWrote[m] = why
			}
			got := judge(tt.pod, v, o, now)
			if diff := cmp.Diff(tt.want, got, ignoreMemory); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
	// What the pod and its Event say.
	c := released([]*marker.Marker{silent}, true)
	for _, want := range []string{"sandbox aaaaaaaaaaaa; netready is not in effect on this node for network k8s-pod-network", "--not-in-effect-hold-max", "--unobserved=ready", "endpointStatusPathPrefix"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}
	if ev, ok := publish.EventFor(&corev1.PodCondition{Reason: publish.ReasonNotProgrammed}, c); !ok || ev.Type != corev1.EventTypeWarning || ev.Reason != publish.ReasonNotObserved || !strings.Contains(ev.Note, "endpointStatusPathPrefix") {
		t.Errorf("Event for the change = %+v, %v; want a Warning NotObserved naming the cause", ev, ok)
	}
}

// TestJudgeOff: while netready is switched off every gated pod is True
// (NetreadyOff), whatever its markers say; once it is on again, a True
// given while off stays on the markers it was given on, and anything
// else is judged as usual.
func TestJudgeOff(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	o := judgeOptions{CondType: "T", PendingTimeout: 10 * time.Minute, UnobservedGrace: 30 * time.Second}
	mk := func(cid, state string) *marker.Marker {
		m := &marker.Marker{Network: "podnet", ContainerID: cid, IfName: "eth0", IPs: []string{"10.1.0.5/24"}, State: state,
			CreatedAt: marker.Time{Time: now.Add(-time.Minute)}, WaitedMs: 5}
		if state == marker.StatePending {
			m.Checks = []marker.CheckResult{{Kind: "file", Target: "(netready off)", Why: "not waited on"}}
		}
		return m
	}
	const sandbox = "aaaaaaaaaaaa-sandbox"
	up := func(conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.1.0.5", PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}},
			Conditions: append([]corev1.PodCondition{{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}}, conds...)}}
	}
	off := publish.Off("T")
	programmed := corev1.PodCondition{Type: "T", Status: corev1.ConditionTrue, Reason: publish.ReasonProgrammed, Message: "sandbox aaaaaaaaaaaa; network podnet (eth0) programmed after 5 ms"}
	released := memory{Off: true, OffSandboxes: "aaaaaaaaaaaa"}
	pending := []*marker.Marker{mk(sandbox, marker.StatePending)}
	tests := []struct {
		name     string
		off      bool
		pod      *corev1.Pod
		view     podView
		want     corev1.PodCondition
		publish  bool
		remember *memory
	}{
		{"off: a pending marker is released", true, up(), podView{Markers: pending}, off, true, &released},
		{"off: no marker yet, within the grace", true, up(), podView{}, off, true, &memory{Off: true}},
		{"off: an unreadable marker", true, up(), podView{Markers: pending, Unreadable: []publish.Unreadable{{Path: "/x", Err: fs.ErrPermission}}}, off, true, &released},
		{"off: a pod that shows True keeps it as it is", true, up(programmed), podView{Markers: pending}, programmed, true, nil},
		{"off: a released pod's first marker comes while off: it is released on it", true, up(off), podView{Markers: pending, Memory: memory{Off: true}}, off, true, &released},
		{"on again: released before its first ADD, its first sandbox keeps the True", false, up(off), podView{Markers: pending, Memory: memory{Off: true}},
			corev1.PodCondition{Type: "T", Status: corev1.ConditionTrue, Reason: publish.ReasonOff, Message: off.Message}, true, &released},
		{"off: a finished pod is not released", true, func() *corev1.Pod { p := up(); p.Status.Phase = corev1.PodSucceeded; return p }(), podView{},
			publish.NotObserved("T", false, 30*time.Second), true, nil},
		{"on again: the True given while off stays", false, up(off), podView{Markers: pending, Memory: released}, corev1.PodCondition{Type: "T", Status: corev1.ConditionTrue, Reason: publish.ReasonOff, Message: off.Message}, true, nil},
		{"on again: the released markers turn ready", false, up(off), podView{Markers: []*marker.Marker{mk(sandbox, marker.StateReady)}, Memory: released},
			publish.ForMarkers([]*marker.Marker{mk(sandbox, marker.StateReady)}, "T", 10*time.Minute, now), true, &memory{Off: true, OffSandboxes: "aaaaaaaaaaaa", Judged: "aaaaaaaaaaaa", JudgedIPs: []string{"10.1.0.5"}}},
		{"on again: a new pod is judged as usual", false, up(), podView{Markers: pending},
			publish.ForMarkers(pending, "T", 10*time.Minute, now), true, &memory{Judged: "aaaaaaaaaaaa", JudgedIPs: []string{"10.1.0.5"}}},
		{"on again: a new sandbox of a released pod is judged as usual", false, up(off), podView{Markers: []*marker.Marker{mk("bbbbbbbbbbbb-new", marker.StatePending)}, Memory: released},
			publish.ForMarkers([]*marker.Marker{mk("bbbbbbbbbbbb-new", marker.StatePending)}, "T", 10*time.Minute, now), true, &memory{Off: true, OffSandboxes: "aaaaaaaaaaaa", Judged: "bbbbbbbbbbbb", JudgedIPs: []string{"10.1.0.5"}}},
		{"on again: released with no marker, past the grace, --unobserved=notready: stays True", false, up(off), podView{Memory: memory{Off: true}},
			corev1.PodCondition{Type: "T", Status: corev1.ConditionTrue, Reason: publish.ReasonOff, Message: off.Message}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			oo := o
			oo.Off = tt.off
			got := judge(tt.pod, tt.view, oo, now)
			if diff := cmp.Diff(tt.want, got.Cond); diff != "" || got.Publish != tt.publish {
				t.Errorf("judge: publish %v, want %v; condition (-want +got):\n%s", got.Publish, tt.publish, diff)
			}
			if diff := cmp.Diff(tt.remember, got.Remember); diff != "" {
				t.Errorf("memory (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJudgeHoldsTheFirstWriteForTheCiliumEndpoint: a pod whose markers
// wait only on the sidecar's look at its CiliumEndpoint gets no condition
// for the first 2 s after ADD (the gate holds it meanwhile), so that a
// prompt publish costs one write, the True (2 s plus crossNode's settle
// with it); then, or with any other unmet
// check, or once it shows a condition, it is judged as always.
func TestJudgeHoldsTheFirstWriteForTheCiliumEndpoint(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	o := judgeOptions{CondType: "T", PendingTimeout: 10 * time.Minute, UnobservedGrace: 30 * time.Second, UnobservedReady: true}
	left := marker.CheckResult{Kind: checks.KindCiliumPublished, Target: "CiliumEndpoint default/web", Why: "left to the sidecar"}
	mk := func(results ...marker.CheckResult) *marker.Marker {
		return &marker.Marker{Network: "cilium", ContainerID: "aaaaaaaaaaaa-sandbox", IfName: "eth0", IPs: []string{"10.1.0.5/32"},
			State: marker.StatePending, CreatedAt: marker.Time{Time: t0}, Checks: results}
	}
	settled := func(m *marker.Marker) *marker.Marker {
		m.Pending = &marker.Pending{CiliumPublished: true, CiliumSettleMs: 1000}
		return m
	}
	local := marker.CheckResult{Kind: "http", Target: "cilium endpoint", Ready: true}
	unmet := marker.CheckResult{Kind: "address", Target: "10.1.0.5", Why: "not yet"}
	notProgrammed := func(m *marker.Marker, at time.Time) judgement {
		return judgement{Cond: publish.ForMarkers([]*marker.Marker{m}, "T", o.PendingTimeout, at), Publish: true}
	}
	shown := &corev1.PodCondition{Type: "T", Status: corev1.ConditionFalse, Reason: publish.ReasonNotProgrammed}
	tests := []struct {
		name string
		m    *marker.Marker
		cur  *corev1.PodCondition
		at   time.Time
		want judgement
	}{
		{"only the CiliumEndpoint left, 500 ms after ADD", mk(local, left), nil, t0.Add(500 * time.Millisecond), judgement{After: 1500 * time.Millisecond}},
		{"only the CiliumEndpoint left, 2 s after ADD", mk(local, left), nil, t0.Add(2 * time.Second), notProgrammed(mk(local, left), t0.Add(2*time.Second))},
		{"with settle 1s, 2.5 s after ADD", settled(mk(local, left)), nil, t0.Add(2500 * time.Millisecond), judgement{After: 500 * time.Millisecond}},
		{"with settle 1s, 3 s after ADD", settled(mk(local, left)), nil, t0.Add(3 * time.Second), notProgrammed(settled(mk(local, left)), t0.Add(3*time.Second))},
		{"a local check unmet too", mk(unmet, left), nil, t0.Add(500 * time.Millisecond), notProgrammed(mk(unmet, left), t0.Add(500*time.Millisecond))},
		{"a condition shown already", mk(local, left), shown, t0.Add(500 * time.Millisecond), notProgrammed(mk(local, left), t0.Add(500*time.Millisecond))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &corev1.Pod{}
			if tt.cur != nil {
				p.Status.Conditions = []corev1.PodCondition{*tt.cur}
			}
			got := judge(p, podView{Markers: []*marker.Marker{tt.m}}, o, tt.at)
			got.Remember = nil
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
}
