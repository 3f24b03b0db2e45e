package conditions

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/pkg/statedir"
)

// ignoreMemory leaves the memory a judgement keeps out of a comparison of
// its condition.
var ignoreMemory = cmpopts.IgnoreFields(judgement{}, "Remember")

// remembered is the memory that the sidecar which published pod's
// condition kept with it, for tables that give the condition alone. It
// reads the message, as only a test may: the sidecar never does.
func remembered(pod *corev1.Pod, condType string) memory {
	cur := publish.Current(pod, condType)
	if cur == nil {
		return memory{}
	}
	var m memory
	sandboxes, markers := publish.ParseLeftBehind(cur)
	for _, s := range sandboxes {
		m = m.withGone(s, nil)
	}
	m = m.withGone("", markers)
	m.Judged = publish.ParseSandbox(cur.Message)
	m.NotInEffect = publish.IsNotInEffect(cur)
	return m
}

// rounds judges a pod again and again as the controller does: each
// judgement's memory is kept and its condition published before the next.
type rounds struct {
	t   *testing.T
	o   judgeOptions
	pod *corev1.Pod
	mem memory
}

func (r *rounds) judge(markers []*marker.Marker, now time.Time) judgement {
	r.t.Helper()
	j := judge(r.pod, podView{Markers: markers, Memory: r.mem}, r.o, now)
	if j.Remember != nil {
		r.mem = *j.Remember
	}
	if j.Publish {
		cond := publish.WithTransition(j.Cond, publish.Current(r.pod, r.o.CondType), now)
		conds := []corev1.PodCondition{cond}
		for _, c := range r.pod.Status.Conditions {
			if c.Type != cond.Type {
				conds = append(conds, c)
			}
		}
		r.pod.Status.Conditions = conds
	}
	return j
}

func (r *rounds) sandbox(status corev1.ConditionStatus, at time.Time) {
	for i, c := range r.pod.Status.Conditions {
		if c.Type == corev1.PodReadyToStartContainers {
			r.pod.Status.Conditions[i].Status, r.pod.Status.Conditions[i].LastTransitionTime = status, metav1.NewTime(at)
			return
		}
	}
	r.pod.Status.Conditions = append(r.pod.Status.Conditions,
		corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: status, LastTransitionTime: metav1.NewTime(at)})
}

// TestLeftBehindBeyondAMessageNeverEarnsTrue: a pod whose old sandbox left
// behind more markers than a condition's message can name never gets a
// True from any of them once a new sandbox is up with the same IP: the
// sidecar remembers them in full, not in the message it cuts.
func TestLeftBehindBeyondAMessageNeverEarnsTrue(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const podIP = "10.1.0.5"
	r := &rounds{t: t, o: judgeOptions{CondType: "T", PendingTimeout: 10 * time.Minute, UnobservedGrace: 30 * time.Second},
		pod: &corev1.Pod{Status: corev1.PodStatus{PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}}}}}
	mk := func(sandbox, network, ifName, ip string, created time.Time) *marker.Marker {
		return &marker.Marker{Network: network, ContainerID: sandbox, IfName: ifName, IPs: []string{ip + "/24"},
			State: marker.StateReady, CreatedAt: marker.Time{Time: created}, WaitedMs: 5}
	}
	const old, fresh = "aaaaaaaaaaaa-old-sandbox", "cccccccccccc-new-sandbox"
	var left []*marker.Marker
	for _, sandbox := range []string{"999999999999-oldest", old} {
		created := t0
		if sandbox == old {
			created = t0.Add(time.Minute)
		}
		left = append(left, mk(sandbox, "podnet", "eth0", podIP, created))
		for i := range 30 {
			left = append(left, mk(sandbox, fmt.Sprintf("net%02d", i), fmt.Sprintf("attachment%02d", i), fmt.Sprintf("192.168.%d.5", i), created))
		}
	}

	r.sandbox(corev1.ConditionTrue, t0.Add(time.Minute))
	if j := r.judge(left, t0.Add(2*time.Minute)); j.Cond.Status != corev1.ConditionTrue {
		t.Fatalf("the old sandbox's own markers: %+v, want True", j.Cond)
	}
	r.sandbox(corev1.ConditionFalse, t0.Add(3*time.Minute))
	j := r.judge(left, t0.Add(3*time.Minute))
	if j.Cond.Reason != publish.ReasonSandboxChanged {
		t.Fatalf("the old sandbox went down: %+v, want SandboxChanged", j.Cond)
	}
	// The trap: the message cannot name them all.
	if _, named := publish.ParseLeftBehind(&j.Cond); len(named) >= len(left) {
		t.Fatalf("the message names all %d left-behind markers; the test needs more than fit", len(left))
	}
	if len(r.mem.GoneMarkers) != len(left) {
		t.Errorf("memory names %d gone markers, want all %d", len(r.mem.GoneMarkers), len(left))
	}
	// A new sandbox with the same IP, before and after the grace, with
	// the old markers still on disk.
	r.sandbox(corev1.ConditionTrue, t0.Add(4*time.Minute))
	for _, now := range []time.Time{t0.Add(4 * time.Minute), t0.Add(4*time.Minute + time.Second), t0.Add(5 * time.Minute), t0.Add(time.Hour)} {
		if j := r.judge(left, now); j.Publish && j.Cond.Status == corev1.ConditionTrue {
			t.Fatalf("at %s: a True from markers a gone sandbox left: %+v", now.Sub(t0), j.Cond)
		}
	}
	// The new sandbox's own marker earns it.
	j = r.judge(append(left, mk(fresh, "podnet", "eth0", podIP, t0.Add(2*time.Hour))), t0.Add(2*time.Hour))
	if j.Cond.Status != corev1.ConditionTrue || !strings.HasPrefix(j.Cond.Message, "sandbox cccccccccccc;") {
		t.Errorf("the new sandbox's marker: %+v, want its True", j.Cond)
	}
}

// TestALostMemoryEndsNotReady: a memory that cannot be read as one, or is
// gone while the pod's condition says there was one, takes the markers of
// ADDs from before the condition as gone: not ready, never a True from
// them; a marker of a later ADD still counts.
func TestALostMemoryEndsNotReady(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	o := judgeOptions{CondType: "T", PendingTimeout: 10 * time.Minute, UnobservedGrace: 30 * time.Second}
	mk := func(sandbox string, created time.Time) *marker.Marker {
		return &marker.Marker{Network: "podnet", ContainerID: sandbox, IfName: "eth0", IPs: []string{"10.1.0.5/24"},
			State: marker.StateReady, CreatedAt: marker.Time{Time: created}, WaitedMs: 5}
	}
	old, later := mk("aaaaaaaaaaaa-old", t0), mk("bbbbbbbbbbbb-new", t0.Add(2*time.Minute))
	pod := func(cur corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.1.0.5", PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}}, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(90 * time.Second))}, cur}}}
	}
	changed := publish.SandboxChanged("T", "", nil)
	changed.LastTransitionTime = metav1.NewTime(t0.Add(time.Minute))
	earned := publish.ForMarkers([]*marker.Marker{old}, "T", time.Hour, t0)
	earned.LastTransitionTime = metav1.NewTime(t0.Add(time.Second))
	now := t0.Add(100 * time.Second)
	tests := []struct {
		name    string
		pod     *corev1.Pod
		markers []*marker.Marker
		status  corev1.ConditionStatus
		reason  string
	}{
		{"SandboxChanged, memory lost: the old marker stays gone", pod(changed), []*marker.Marker{old}, "", ""},
		{"True, memory lost: its own marker no longer earns it", pod(earned), []*marker.Marker{old}, corev1.ConditionFalse, publish.ReasonSandboxChanged},
		{"a later ADD's marker counts", pod(changed), []*marker.Marker{old, later}, corev1.ConditionTrue, publish.ReasonProgrammed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := judge(tt.pod, podView{Markers: tt.markers, Lost: true}, o, now)
			if j.Cond.Status != tt.status || j.Cond.Reason != tt.reason {
				t.Errorf("judge = %s %s (%q), want %s %s", j.Cond.Status, j.Cond.Reason, j.Cond.Message, tt.status, tt.reason)
			}
			if j.Remember == nil || !j.Remember.gone("aaaaaaaaaaaa", "aaaaaaaaaaaa_eth0") {
				t.Errorf("memory kept = %+v, want one naming the old marker gone", j.Remember)
			}
		})
	}
}

// TestMemoryFile: the memory survives a write and a read in full, merges
// what another writer named gone, and one that is not a memory is lost,
// not empty.
func TestMemoryFile(t *testing.T) {
	dir := t.TempDir()
	const uid = types.UID("u-1")
	if _, err := readMemory(dir, uid); err != errNoMemory {
		t.Fatalf("no file: err = %v, want errNoMemory", err)
	}
	var long []string
	for i := range 200 {
		long = append(long, fmt.Sprintf("aaaaaaaaaaaa_attachment%03d", i))
	}
	want := memory{}.withGone("aaaaaaaaaaaa", long)
	want.Judged = "aaaaaaaaaaaa"
	if err := writeMemory(dir, uid, want); err != nil {
		t.Fatal(err)
	}
	if err := writeMemory(dir, uid, memory{GoneSandboxes: []string{"bbbbbbbbbbbb"}, Judged: "cccccccccccc"}); err != nil {
		t.Fatal(err)
	}
	got, err := readMemory(dir, uid)
	if err != nil {
		t.Fatal(err)
	}
	want = want.withGone("bbbbbbbbbbbb", nil)
	want.Version, want.Judged = memoryVersion, "cccccccccccc"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("memory read back (-want +got):\n%s", diff)
	}
	if err := os.WriteFile(memoryPath(dir, uid), []byte(`{"version":1,"goneMark`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readMemory(dir, uid); err == nil || !strings.Contains(err.Error(), errMemoryLost.Error()) {
		t.Errorf("half a file: err = %v, want errMemoryLost", err)
	}
	if err := sweepMemory(dir, func(types.UID) bool { return false }, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, statedir.PodMemories, "u-1"+statedir.MemorySuffix)); !os.IsNotExist(err) {
		t.Errorf("the memory of a pod no longer on the node was not swept: %v", err)
	}
}

// TestJudgeRemembers: what each judgement asks to keep of the pod, and
// that one which changes nothing asks for no write.
func TestJudgeRemembers(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	o := judgeOptions{CondType: "T", PendingTimeout: 10 * time.Minute, UnobservedGrace: 30 * time.Second, HoldMax: time.Minute}
	ready := &marker.Marker{Network: "podnet", ContainerID: "aaaaaaaaaaaa-sandbox", IfName: "eth0", IPs: []string{"10.1.0.5/24"},
		State: marker.StateReady, CreatedAt: marker.Time{Time: t0}, WaitedMs: 5}
	silent := &marker.Marker{Network: "k8s-pod-network", ContainerID: "aaaaaaaaaaaa-sandbox", IfName: "eth0", IPs: []string{"10.1.0.5/24"},
		State: marker.StatePending, CreatedAt: marker.Time{Time: t0}, Checks: []marker.CheckResult{{Kind: "file", Target: "/x", Why: "calico preset: no"}}}
	prtsc := func(s corev1.ConditionStatus, at time.Time) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: s, LastTransitionTime: metav1.NewTime(at)}
	}
	pod := func(conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.1.0.5", PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}}, Conditions: conds}}
	}
	earned := publish.ForMarkers([]*marker.Marker{ready}, "T", time.Hour, t0)
	judged := memory{Judged: "aaaaaaaaaaaa", JudgedIPs: []string{"10.1.0.5"}}
	tests := []struct {
		name string
		pod  *corev1.Pod
		v    podView
		want *memory
	}{
		{"first True: the sandbox it was judged on", pod(prtsc(corev1.ConditionTrue, t0)), podView{Markers: []*marker.Marker{ready}}, &judged},
		{"the same again: no write", pod(prtsc(corev1.ConditionTrue, t0), earned), podView{Markers: []*marker.Marker{ready}, Memory: judged}, nil},
		{"the sandbox went down: it and its marker are gone", pod(prtsc(corev1.ConditionFalse, now), earned), podView{Markers: []*marker.Marker{ready}, Memory: judged},
			&memory{GoneSandboxes: []string{"aaaaaaaaaaaa"}, GoneMarkers: []string{"aaaaaaaaaaaa_eth0"}, Judged: "aaaaaaaaaaaa", JudgedIPs: []string{"10.1.0.5"}}},
		{"not in effect: the verdict on its sandbox", pod(prtsc(corev1.ConditionTrue, t0)),
			podView{Markers: []*marker.Marker{silent}, NeverWrote: map[*marker.Marker]string{silent: "calico preset: no"}},
			&memory{Judged: "aaaaaaaaaaaa", NotInEffect: true, JudgedIPs: []string{"10.1.0.5"}}},
		{"a lost memory is written again", pod(prtsc(corev1.ConditionTrue, t0)), podView{Markers: []*marker.Marker{ready}, Lost: true}, &judged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, judge(tt.pod, tt.v, o, now).Remember); diff != "" {
				t.Errorf("memory to keep (-want +got):\n%s", diff)
			}
		})
	}
}

// TestViewOfAsksForRechecks: reading what a pod's marker files tell asks
// for a re-check of each pending one, the end of one for each ready one,
// and feeds the Node's warnings; a re-check's progress stands for its
// marker, and an unreadable file keeps the pod not ready.
func TestViewOfAsksForRechecks(t *testing.T) {
	started := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	pending := &marker.Marker{Network: "a", IfName: "eth0", State: marker.StatePending, CreatedAt: marker.Time{Time: started.Add(time.Second)},
		Checks: []marker.CheckResult{{Why: "calico preset: not set up"}}}
	progress := &marker.Marker{Network: "a", IfName: "eth0", State: marker.StatePending, CreatedAt: pending.CreatedAt, WaitedMs: 9}
	ready := &marker.Marker{Network: "b", IfName: "net1", State: marker.StateReady}
	bad := errors.New("EMFILE")
	files := []markerFile{{Path: "/s/a/p", Marker: pending, Progress: progress}, {Path: "/s/b/r", Marker: ready}, {Path: "/s/b/x", Err: bad}}
	v, a, basis := viewOf(files, started, func(string) bool { return false })
	if diff := cmp.Diff([]*marker.Marker{progress, ready}, v.Markers); diff != "" {
		t.Errorf("markers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]publish.Unreadable{{Path: "/s/b/x", Err: bad}}, v.Unreadable, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("unreadable (-want +got):\n%s", diff)
	}
	want := actions{Recheck: []markerFile{files[0]}, StopRecheck: []string{"/s/b/r"},
		Presets: []nodewriter.Preset{{Network: "a"}, {Network: "b", Ready: true}}}
	if diff := cmp.Diff(want, a, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	if !strings.Contains(basis, "/s/a/p pending") || !strings.Contains(basis, "/s/b/x unreadable: EMFILE") {
		t.Errorf("basis %q does not name the files as on disk", basis)
	}
}

// TestTakingOverFromAnOlderSidecar: a pod with no memory file whose
// condition a v0.5 sidecar wrote inherits what that message kept (gone
// markers, the judged sandbox, NotInEffect), so that the upgrade neither
// counts a gone sandbox's marker again nor forgets the judged sandbox;
// what it inherits is written to the file.
func TestTakingOverFromAnOlderSidecar(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	o := judgeOptions{CondType: "T", PendingTimeout: 10 * time.Minute, UnobservedGrace: 30 * time.Second}
	gone := &marker.Marker{Network: "podnet", ContainerID: "aaaaaaaaaaaa-old", IfName: "eth0", IPs: []string{"10.1.0.5/24"},
		State: marker.StateReady, CreatedAt: marker.Time{Time: t0}, WaitedMs: 5}
	pod := func(cur corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.1.0.5", PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}}, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-time.Minute))}, cur}}}
	}
	leftBehind := publish.LeftBehind(publish.NotObserved("T", false, o.UnobservedGrace), []string{"aaaaaaaaaaaa_eth0"})
	earned := publish.ForMarkers([]*marker.Marker{gone}, "T", time.Hour, t0)
	now := t0.Add(5 * time.Minute)

	t.Run("a NotObserved naming a left-behind marker", func(t *testing.T) {
		m, inherited := inheritedMemory(&leftBehind)
		if !inherited || !m.gone("", "aaaaaaaaaaaa_eth0") {
			t.Fatalf("inherited %v: %+v, want the left-behind marker gone", inherited, m)
		}
		j := judge(pod(leftBehind), podView{Markers: []*marker.Marker{gone}, Memory: m, Inherited: true}, o, now)
		if j.Cond.Status == corev1.ConditionTrue {
			t.Errorf("judge = True (%q) from a marker the older sidecar named left behind", j.Cond.Message)
		}
		if j.Remember == nil || !j.Remember.gone("", "aaaaaaaaaaaa_eth0") {
			t.Errorf("memory kept = %+v, want the inherited one written", j.Remember)
		}
	})
	t.Run("a True names the sandbox it was judged on", func(t *testing.T) {
		m, inherited := inheritedMemory(&earned)
		if !inherited || m.Judged != "aaaaaaaaaaaa" {
			t.Fatalf("inherited %v: %+v, want Judged aaaaaaaaaaaa", inherited, m)
		}
		// The sandbox is gone with its marker: SandboxChanged names it.
		j := judge(pod(earned), podView{Memory: m, Inherited: true}, o, t0.Add(-50*time.Second))
		if j.Cond.Reason != publish.ReasonSandboxChanged || j.Remember == nil || !j.Remember.gone("aaaaaaaaaaaa", "") {
			t.Errorf("judge = %s %s, memory %+v; want SandboxChanged naming aaaaaaaaaaaa gone", j.Cond.Status, j.Cond.Reason, j.Remember)
		}
	})
	t.Run("nothing to inherit", func(t *testing.T) {
		if m, inherited := inheritedMemory(nil); inherited || !m.equal(memory{}) {
			t.Errorf("no condition: inherited %v, %+v", inherited, m)
		}
	})
}
