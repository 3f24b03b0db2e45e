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
			judgement{After: 31 * time.Second}, &seen},
		{"a Job pod kubelet did not finish within the grace: it ends", job(pod("10.1.0.5", t0, earned)), nil,
			func() memory { m := seen; m.EndSeen = now.Add(-40 * time.Second).Unix(); return m }(),
			judgement{Cond: changed, Publish: true, After: 31 * time.Second}, nil},
		{"a Job pod's wait begun in the future (clock stepped back): begun now", job(pod("10.1.0.5", t0, earned)), nil,
			func() memory { m := seen; m.EndSeen = now.Add(time.Hour).Unix(); return m }(),
			judgement{After: 31 * time.Second}, &seen},
		{"SandboxChanged set in the future (clock stepped back): re-judged within the grace", pod("10.1.0.5", t0, steppedBack), nil, endedMem,
			judgement{After: 31 * time.Second}, nil},
		{"the next sandbox's ADD while kubelet shows the old IP: its marker is not remembered gone", pod("10.1.0.5", t0, earned), []*marker.Marker{next}, judged,
			judgement{Cond: publish.SandboxChanged("T", "aaaaaaaaaaaa", []string{"cccccccccccc_eth0"}), Publish: true, After: 31 * time.Second}, &endedMem},
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
