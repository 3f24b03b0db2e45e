package conditions

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/publish"
)

// TestJudgeEndOfATrue: a True whose markers are gone ends, whatever times
// kubelet shows, unless kubelet shows another sandbox's IPs; the waits it
// allows are bounded, and what it remembers as gone is only what surely is.
func TestJudgeEndOfATrue(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	o := judgeOptions{CondType: "T", PendingTimeout: 10 * time.Minute, UnobservedGrace: 30 * time.Second, UnobservedReady: true}
	earned := corev1.PodCondition{Type: "T", Status: corev1.ConditionTrue, Reason: publish.ReasonProgrammed,
		Message: "sandbox aaaaaaaaaaaa; network podnet (eth0) programmed after 5 ms", LastTransitionTime: metav1.NewTime(t0)}
	judged := memory{Judged: "aaaaaaaaaaaa", JudgedIPs: []string{"10.1.0.5"}}
	pod := func(ip string, upSince time.Time, cond corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, Conditions: []corev1.PodCondition{cond,
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(upSince)}}}}
	}
	job := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "job", ContainerID: "containerd://c1"}}
		return p
	}
	changed := publish.SandboxChanged("T", "aaaaaaaaaaaa", nil)
	steppedBack := changed
	steppedBack.LastTransitionTime = metav1.NewTime(now.Add(time.Hour))
	next := &marker.Marker{Network: "podnet", ContainerID: "cccccccccccc-next", IfName: "eth0", IPs: []string{"10.1.0.9/24"},
		State: marker.StatePending, CreatedAt: marker.Time{Time: now.Add(-2 * time.Second)},
		Checks: []marker.CheckResult{{Kind: "file", Target: "/x", Why: "not yet"}}}
	endedMem := judged.withGone("aaaaaaaaaaaa", nil)
	seen := endedMem
	seen.EndSeen = now.Unix()
	tests := []struct {
		name    string
		pod     *corev1.Pod
		markers []*marker.Marker
		mem     memory
		want    judgement
		wantMem *memory
	}{
		{"kubelet reports the earning sandbox up long after the True (a slow pull): it ends", pod("10.1.0.5", t0.Add(10*time.Minute), earned), nil, judged,
			judgement{Cond: changed, Publish: true, After: 31 * time.Second}, &endedMem},
		{"kubelet shows another sandbox's IP, up past the grace: not observed", pod("10.1.0.9", t0.Add(10*time.Minute), earned), nil, judged,
			judgement{Cond: publish.NotObserved("T", true, 30*time.Second), Publish: true}, nil},
		{"no IPs remembered (an older sidecar's memory): it ends", pod("10.1.0.9", t0.Add(10*time.Minute), earned), nil, memory{Judged: "aaaaaaaaaaaa"},
			judgement{Cond: changed, Publish: true, After: 31 * time.Second}, &memory{Judged: "aaaaaaaaaaaa", GoneSandboxes: []string{"aaaaaaaaaaaa"}}},
		{"a finishing Job pod: no write yet, its sandbox remembered as gone", job(pod("10.1.0.5", t0, earned)), nil, judged,
			judgement{After: 31 * time.Second, EndWait: true}, &seen},
		{"a Job pod kubelet reports down but not finished: it ends at once", func() *corev1.Pod {
			p := job(pod("10.1.0.5", t0, earned))
			p.Status.Conditions[1].Status = corev1.ConditionFalse
			p.Status.Conditions[1].LastTransitionTime = metav1.NewTime(now)
			return p
		}(), nil, judged, judgement{Cond: changed, Publish: true, After: 31 * time.Second}, &endedMem},
		{"a Job pod kubelet did not finish within the grace: it ends", job(pod("10.1.0.5", t0, earned)), nil,
			func() memory { m := seen; m.EndSeen = now.Add(-40 * time.Second).Unix(); return m }(),
			judgement{Cond: changed, Publish: true, After: 31 * time.Second}, nil},
		{"a Job pod's wait begun in the future (clock stepped back): begun now", job(pod("10.1.0.5", t0, earned)), nil,
			func() memory { m := seen; m.EndSeen = now.Add(time.Hour).Unix(); return m }(),
			judgement{After: 31 * time.Second, EndWait: true}, &seen},
		{"SandboxChanged set in the future (clock stepped back): its hold is over", pod("10.1.0.5", t0, steppedBack), nil, endedMem,
			judgement{Cond: publish.NotObserved("T", true, 30*time.Second), Publish: true}, nil},
		{"the next sandbox's ADD while kubelet shows the old IP: its marker decides", pod("10.1.0.5", t0, earned), []*marker.Marker{next}, judged,
			judgement{Cond: publish.ForMarkers([]*marker.Marker{next}, "T", 10*time.Minute, now), Publish: true},
			&memory{Judged: "cccccccccccc", JudgedIPs: []string{"10.1.0.9"}}},
		{"an older sandbox's marker left, kubelet showing another IP: left behind", pod("10.1.0.5", t0.Add(time.Minute), earned),
			[]*marker.Marker{func() *marker.Marker { m := *next; m.CreatedAt = marker.Time{Time: t0}; return &m }()}, judged,
			judgement{Cond: publish.SandboxChanged("T", "aaaaaaaaaaaa", []string{"cccccccccccc_eth0"}), Publish: true, After: 31 * time.Second},
			func() *memory { m := endedMem.withGone("", []string{"cccccccccccc_eth0"}); return &m }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judge(tt.pod, podView{Markers: tt.markers, Memory: tt.mem}, o, now)
			if diff := cmp.Diff(tt.want, got, ignoreMemory); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
			if tt.wantMem != nil {
				if diff := cmp.Diff(tt.wantMem, got.Remember); diff != "" {
					t.Errorf("memory to keep (-want +got):\n%s", diff)
				}
			}
		})
	}
	t.Run("a Job pod kubelet finished: no write, nothing to keep, not looked at again", func(t *testing.T) {
		p := job(pod("10.1.0.5", t0, earned))
		p.Status.Phase = corev1.PodSucceeded
		if got := judge(p, podView{Memory: judged}, o, now); !cmp.Equal(got, judgement{}) {
			t.Errorf("judge = %+v, want nothing", got)
		}
	})
}

// TestAJobPodsTrueEndsWhenItsMemoryCannotBeKept: the wait for a finishing
// Job pod's phase counts from a time kept in its memory. With the memory
// kept, the True is left alone (the control); with a memory that cannot
// be written, the wait would start again every round, so the True ends.
func TestAJobPodsTrueEndsWhenItsMemoryCannotBeKept(t *testing.T) {
	job := func() *corev1.Pod {
		p := gatedPod("job", "u-job")
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		m := &marker.Marker{Network: "podnet", ContainerID: "c-u-job", IfName: "eth0", IPs: []string{"10.200.0.5/24"},
			State: marker.StateReady, CreatedAt: marker.Time{Time: time.Now().Add(-time.Hour)}, WaitedMs: 7}
		earned := publish.ForMarkers([]*marker.Marker{m}, publish.DefaultConditionType, time.Hour, time.Now())
		earned.LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Hour))
		p.Status = corev1.PodStatus{PodIP: "10.200.0.5", PodIPs: []corev1.PodIP{{IP: "10.200.0.5"}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", ContainerID: "containerd://c1"}},
			Conditions: []corev1.PodCondition{earned, {Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}}}
		return p
	}
	t.Run("memory kept: no write while the phase may come", func(t *testing.T) {
		h := start(t, nil, job())
		if n := h.settle(); n != 0 {
			t.Errorf("%d pods/status patches, want none: %v", n, h.patchBodies())
		}
	})
	t.Run("memory not kept: the True ends", func(t *testing.T) {
		h := newHarness(t, nil, job())
		h.c.keep = func(string, types.UID, memory) error { return errors.New("no space left on device") }
		h.run()
		h.waitFor("job", "SandboxChanged", func(c *corev1.PodCondition) bool {
			return c.Status == corev1.ConditionFalse && c.Reason == publish.ReasonSandboxChanged
		})
	})
}
