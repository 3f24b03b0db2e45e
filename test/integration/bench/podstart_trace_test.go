//go:build integration

package bench

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness/kube"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// cniResultsDir is where libcni, containerd's CNI library, caches each
// attachment's result, once the whole chain's ADD has returned.
const cniResultsDir = "/var/lib/cni/results"

// startSimplePatcher is the floor of any readiness gate: the simplest
// agent that sets a pod's gate condition, with one strategic-merge patch
// of pods/status per pod, at the moment netready's sidecar publishes a pod
// whose network is programmed before its ADD: when the pod's chain ADD has
// returned (its result appears in libcni's cache; polled every 5 ms). With
// fromWatch it patches instead when a watch of the namespace shows the
// sandbox up (kubelet's PodReadyToStartContainers True), the earliest
// moment the API tells. It stops at the end of the benchmark.
func startSimplePatcher(b *testing.B, client kubernetes.Interface, namespace, condType string, fromWatch bool) {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	patch := func(name string, uid types.UID) {
		body := fmt.Sprintf(`{"metadata":{"uid":%q},"status":{"conditions":[{"type":%q,"status":"True","reason":"Patched","lastTransitionTime":%q}]}}`,
			uid, condType, time.Now().UTC().Format(time.RFC3339))
		go func() {
			_, err := client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{}, "status")
			if err != nil && ctx.Err() == nil {
				b.Errorf("simple patcher: %s: %v", name, err)
			}
		}()
	}
	if fromWatch {
		go patchFromWatch(ctx, client, namespace, condType, patch)
		return
	}
	go func() {
		seen := map[string]bool{}
		for tick := time.NewTicker(5 * time.Millisecond); ctx.Err() == nil; <-tick.C {
			entries, _ := os.ReadDir(cniResultsDir)
			for _, e := range entries {
				if seen[e.Name()] {
					continue
				}
				var cached struct {
					CNIArgs [][2]string `json:"cniArgs"`
				}
				data, err := os.ReadFile(filepath.Join(cniResultsDir, e.Name()))
				if err != nil || json.Unmarshal(data, &cached) != nil {
					continue // being written: read again at the next tick
				}
				seen[e.Name()] = true
				args := map[string]string{}
				for _, kv := range cached.CNIArgs {
					args[kv[0]] = kv[1]
				}
				if args["K8S_POD_NAMESPACE"] == namespace {
					patch(args["K8S_POD_NAME"], types.UID(args["K8S_POD_UID"]))
				}
			}
		}
	}()
}

func patchFromWatch(ctx context.Context, client kubernetes.Interface, namespace, condType string, patch func(string, types.UID)) {
	patched := map[types.UID]bool{}
	for ctx.Err() == nil {
		// A watch without a resourceVersion starts with every pod of the
		// namespace: one that ends is simply opened again.
		w, err := client.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || patched[p.UID] || !publish.Gated(p, condType) || !sandboxUp(p) {
				continue
			}
			patched[p.UID] = true
			patch(p.Name, p.UID)
		}
	}
}

func sandboxUp(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReadyToStartContainers {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// daemonSetCPU returns a sampler of the CPU time (user and system) that
// netready's DaemonSet pod on the node has used so far, per container,
// from its containers' cgroups (cpuacct.usage).
func daemonSetCPU(b *testing.B, n *kube.K8sNode) func() map[string]time.Duration {
	pods, err := n.Admin.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		if strings.HasPrefix(pods.Items[i].Name, "netready-") && pods.Items[i].Spec.NodeName == kube.NodeName {
			pod = &pods.Items[i]
		}
	}
	if pod == nil {
		b.Fatal("no netready DaemonSet pod on the node")
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/cpuacct/*/kubepods*/pod" + string(pod.UID))
	more, _ := filepath.Glob("/sys/fs/cgroup/cpuacct/*/kubepods*/*/pod" + string(pod.UID))
	dirs = append(dirs, more...)
	if len(dirs) != 1 {
		b.Fatalf("the cgroup of pod %s: found %v", pod.Name, dirs)
	}
	files := map[string]string{"whole pod": filepath.Join(dirs[0], "cpuacct.usage")}
	for _, c := range pod.Status.ContainerStatuses {
		_, id, _ := strings.Cut(c.ContainerID, "://")
		files[c.Name] = filepath.Join(dirs[0], id, "cpuacct.usage")
	}
	return func() map[string]time.Duration {
		use := map[string]time.Duration{}
		for name, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				b.Fatalf("the DaemonSet's CPU: %v", err)
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
			if err != nil {
				b.Fatalf("the DaemonSet's CPU, %s: %v", f, err)
			}
			use[name] = time.Duration(ns)
		}
		return use
	}
}

// podTimeline is what a watch saw of one pod in trace mode: each change
// of its phase, IP and conditions, with the time.
type podTimeline struct {
	created time.Time
	uid     types.UID
	last    string
	lines   []string
}

func (t *podTimeline) see(p *corev1.Pod, now time.Time) {
	t.uid = p.UID
	parts := []string{string(p.Status.Phase), "ip=" + p.Status.PodIP}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized,
		kube.NodeConditionType, corev1.ContainersReady, corev1.PodReady} {
		for _, c := range p.Status.Conditions {
			if c.Type != ct {
				continue
			}
			s := fmt.Sprintf("%s=%s", c.Type, c.Status)
			if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
				s += fmt.Sprintf("(%s: %s)", c.Reason, c.Message)
			}
			parts = append(parts, s)
		}
	}
	if s := strings.Join(parts, " "); s != t.last {
		t.last = s
		t.lines = append(t.lines, fmt.Sprintf("  %s  %+8.1f ms  %s", now.UTC().Format("15:04:05.000000"), msf(now.Sub(t.created)), s))
	}
}

func (t *podTimeline) String() string {
	return fmt.Sprintf("  %s  created (Create called), uid %s\n%s", t.created.UTC().Format("15:04:05.000000"), t.uid, strings.Join(t.lines, "\n"))
}

// kubeletVerbosity sets kubelet's log verbosity at run time, through its
// /debug/flags/v handler (the node's kubelet serves on loopback, with
// anonymous access and AlwaysAllow, and a self-signed certificate).
func kubeletVerbosity(b *testing.B, v int) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, _ := http.NewRequest(http.MethodPut, "https://127.0.0.1:10250/debug/flags/v", strings.NewReader(strconv.Itoa(v)))
	resp, err := c.Do(req)
	if err != nil {
		b.Fatalf("kubelet verbosity: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("kubelet verbosity: %s", resp.Status)
	}
}

// keepNodeLogs copies the node's logs to dir at the end of the benchmark,
// before the node is torn down: its daemons' (kubelet's among them), the
// pods' (the DaemonSet's containers), and containerd's.
func keepNodeLogs(b *testing.B, n *kube.K8sNode, dir string) {
	b.Cleanup(func() {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Errorf("trace: %v", err)
			return
		}
		srcs := []string{n.Path("logs"), n.Path("pod-logs")}
		// The harness's containerd keeps its log in its own temporary
		// folder; integration tests run one at a time, so the newest is
		// this node's.
		logs, _ := filepath.Glob(filepath.Join(os.TempDir(), "nr-cri-*", "containerd.log"))
		slices.SortFunc(logs, func(a, b string) int { return modTime(b).Compare(modTime(a)) })
		if len(logs) > 0 {
			srcs = append(srcs, logs[0])
		}
		for _, src := range srcs {
			if out, err := exec.Command("cp", "-a", src, dir).CombinedOutput(); err != nil {
				b.Errorf("trace: copy %s: %v\n%s", src, err, out)
			}
		}
		b.Logf("trace: the node's logs are in %s", dir)
	})
}

func modTime(path string) time.Time {
	st, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

// TestPodStartFigures: a row's figure is the median of its row-runs'
// percentiles (the mean of the middle two for an even count, nothing for
// none), and only a Ready False for the gates alone counts as held.
func TestPodStartFigures(t *testing.T) {
	run := func(ms ...int) podStartRow {
		var r podStartRow
		for _, m := range ms {
			r.latencies = append(r.latencies, time.Duration(m)*time.Millisecond)
		}
		return r
	}
	got := []time.Duration{
		medianOf(nil, .5),
		medianOf([]podStartRow{run(10)}, .5),
		medianOf([]podStartRow{run(10), run(30)}, .5),
		medianOf([]podStartRow{run(50), run(10), run(30)}, .5),
		medianOf([]podStartRow{run(1, 2, 3, 100)}, .99),
	}
	want := []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond, 100 * time.Millisecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("medianOf (-want +got):\n%s", diff)
	}
	pod := func(status corev1.ConditionStatus, reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status, Reason: reason}}}}
	}
	held := []bool{
		heldByGate(pod(corev1.ConditionFalse, "ReadinessGatesNotReady")),
		heldByGate(pod(corev1.ConditionFalse, "ContainersNotReady")),
		heldByGate(pod(corev1.ConditionTrue, "")),
		heldByGate(&corev1.Pod{}),
	}
	if diff := cmp.Diff([]bool{true, false, false, false}, held); diff != "" {
		t.Errorf("heldByGate (-want +got):\n%s", diff)
	}
}
