//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/conflist"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/pkg/taint"
)

// kubectl runs the real kubectl as the node's admin.
func (n *k8sNode) kubectl(args ...string) string {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append([]string{"--kubeconfig", n.path("pki/admin.kubeconfig"), "--cache-dir", n.path("kubectl-cache")}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(n.bins, "kubectl"), full...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// runtimeHasNetready reports whether containerd's loaded CNI config (as
// crictl info shows it) chains netready in.
func (n *k8sNode) runtimeHasNetready() bool {
	out, err := n.cri.crictl("info", "-o", "json")
	if err != nil {
		return false
	}
	var info map[string]json.RawMessage
	json.Unmarshal([]byte(out), &info)
	return strings.Contains(string(info["cniconfig"]), "netready")
}

// importImage loads an OCI archive into containerd's k8s.io namespace.
func (n *k8sNode) importImage(archive string) {
	n.t.Helper()
	out, err := exec.Command(filepath.Join(n.cri.bins, "ctr"), "--address", n.cri.sock, "-n", "k8s.io", "images", "import", archive).CombinedOutput()
	if err != nil {
		n.t.Fatalf("ctr images import %s: %v\n%s", archive, err, out)
	}
}

// heartbeat keeps the agent's heartbeat file fresh until paused.
type heartbeat struct {
	path   string
	paused atomic.Bool
}

func startHeartbeat(t testing.TB, path string) *heartbeat {
	h := &heartbeat{path: path}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	os.WriteFile(path, nil, 0o644)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			if !h.paused.Load() {
				now := time.Now()
				os.Chtimes(path, now, now)
			}
		}
	}()
	return h
}

// nodePod is a pod of the pause image on the node; gated adds the gate.
func nodePod(name string, gated bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{NodeName: nodeName, TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "app", Image: "netready.test/pause:1", ImagePullPolicy: corev1.PullNever}}},
	}
	if gated {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: nodeConditionType}}
	}
	return p
}

// createUnschedulable creates a pod for the scheduler to place, and
// returns the note of the FailedScheduling event it gets. The 1.36
// scheduler names no taint key ("node(s) had untolerated taint(s)").
func (n *k8sNode) createUnschedulable(name string) string {
	n.t.Helper()
	p := nodePod(name, false)
	p.Spec.NodeName = ""
	n.program(name)
	n.createPod(p)
	var note string
	n.waitFor("FailedScheduling for "+name+" naming an untolerated taint", time.Minute, func() bool {
		evs, _ := n.Admin.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == "FailedScheduling" && strings.Contains(e.Note, "untolerated taint") {
				note = e.Note
				return true
			}
		}
		return false
	})
	return note
}

func (n *k8sNode) createPod(p *corev1.Pod) {
	n.t.Helper()
	if _, err := n.Admin.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *k8sNode) pod(name string) *corev1.Pod {
	p, err := n.Admin.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return &corev1.Pod{}
	}
	return p
}

// nodeMetrics scrapes the deployed sidecar: host network, loopback port
// 9095 (deploy/'s METRICS_LISTEN).
func nodeMetrics(t *testing.T) string {
	resp, err := http.Get("http://127.0.0.1:9095/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// programLater plays Felix: once the pod's address is allocated (its veth
// exists), it waits delay and writes the pod's endpoint-status file, which
// the calico preset waits for. It returns when the file was written.
func (n *k8sNode) programLater(name string, delay time.Duration) <-chan time.Time {
	before := n.allocations()
	done := make(chan time.Time, 1)
	go func() {
		for start := time.Now(); n.allocations() <= before && time.Since(start) < time.Minute; time.Sleep(20 * time.Millisecond) {
		}
		time.Sleep(delay)
		n.programIn("default", name)
		done <- time.Now()
	}()
	return done
}

func (n *k8sNode) program(name string) { n.programIn("default", name) }

func (n *k8sNode) programIn(namespace, name string) {
	os.WriteFile(filepath.Join(n.path("calico"), checks.CalicoStatusFileName(namespace, name, "eth0")), []byte("{}"), 0o644)
}

func (n *k8sNode) allocations() int {
	entries, _ := os.ReadDir(n.path("ipam/nr-node"))
	c := 0
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			c++
		}
	}
	return c
}

// markerFor finds the pod's marker by its UID.
func (n *k8sNode) markerFor(p *corev1.Pod) *marker.Marker {
	m, _ := n.markerFileFor(p)
	return m
}

// markerFileFor is markerFor with the marker's path.
func (n *k8sNode) markerFileFor(p *corev1.Pod) (*marker.Marker, string) {
	entries, _ := os.ReadDir(n.path("state/nr-node"))
	for _, e := range entries {
		path := n.path("state/nr-node/" + e.Name())
		if m, err := marker.ReadFile(path); err == nil && m.Pod.UID == string(p.UID) {
			return m, path
		}
	}
	return nil, ""
}

func (n *k8sNode) waitPod(name, what string, limit time.Duration, ok func(*corev1.Pod) bool) *corev1.Pod {
	n.t.Helper()
	var p *corev1.Pod
	for start := time.Now(); time.Since(start) < limit; time.Sleep(100 * time.Millisecond) {
		if p = n.pod(name); ok(p) {
			return p
		}
	}
	n.t.Fatalf("pod %s: %s: not within %s; status %+v", name, what, limit, p.Status)
	return nil
}

func (n *k8sNode) entry() map[string]any {
	n.t.Helper()
	f, err := conflist.Pick(n.ConfDir, "")
	if err != nil {
		n.t.Fatal(err)
	}
	var found map[string]any
	count := 0
	for _, p := range f.Plugins {
		var m map[string]any
		json.Unmarshal(p, &m)
		if m["type"] == "netready" {
			found, count = m, count+1
		}
	}
	if count > 1 {
		n.t.Errorf("%d netready entries in %s", count, f.Path)
	}
	return found
}

// quickStart holds the README's Quick start: the commands TestNode runs
// (the README must hold each verbatim), the two lines of its
// kustomization, and what test/node/kustomization.yaml starts with: the
// same, plus the pool component the README adds for a host-local chain.
var quickStart = struct{ commands, kustomization, node []string }{
	commands: []string{
		"tar -xzf netready-$VERSION-deploy.tar.gz",
		"kubectl apply -k . --server-side",
		"kubectl -n kube-system rollout status daemonset/netready --timeout=2m",
		"kubectl create namespace demo",
		"kubectl label namespace demo netready.io/readiness-gate=enabled",
		"kubectl -n demo wait pod/web --for=condition=Ready --timeout=2m",
	},
	kustomization: []string{"resources: [deploy]", "components: [deploy/components/calico]"},
	node:          []string{"resources: [deploy]", "components: [deploy/components/calico, deploy/components/pool]"},
}

// unpackRelease does the Quick start's first steps in the node's own
// folder: the release's deploy/ beside test/node's kustomization, and the
// release's image imported into the node's containerd.
func (n *k8sNode) unpackRelease() string {
	n.t.Helper()
	dist, version := releaseDir(n.t)
	dir := n.path("quickstart")
	os.MkdirAll(dir, 0o755)
	mustRun(n.t, "tar", "-xzf", filepath.Join(dist, "netready-"+version+"-deploy.tar.gz"), "-C", dir)
	files, _ := filepath.Glob("../node/*")
	for _, f := range files {
		data, _ := os.ReadFile(f)
		os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644)
	}
	n.importImage(filepath.Join(dist, "netready-image.tar"))
	return dir
}

// netready runs the release's kubectl plugin as an operator does,
// `kubectl netready ARGS`, found by kubectl on PATH, and returns its
// output and exit code.
func (n *k8sNode) netready(args ...string) (string, int) {
	n.t.Helper()
	bin := n.path("quickstart/bin")
	if _, err := os.Stat(filepath.Join(bin, "kubectl-netready")); err != nil {
		dist, version := releaseDir(n.t)
		os.MkdirAll(bin, 0o755)
		mustRun(n.t, "tar", "-xzf", filepath.Join(dist, "netready-"+version+"-linux-"+runtime.GOARCH+".tar.gz"), "-C", bin, "kubectl-netready")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.bins, "kubectl"), append([]string{"netready"}, args...)...)
	// kubectl takes no flags before a plugin's name; the plugin reads
	// KUBECONFIG as kubectl does.
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+n.path("pki/admin.kubeconfig"))
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("kubectl netready %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), code
}

// explainSays runs kubectl netready explain on a pod and checks its exit
// code and that its output holds every part.
func (n *k8sNode) explainSays(pod string, wantCode int, parts ...string) string {
	n.t.Helper()
	out, code := n.netready("explain", "-n", "default", pod)
	if code != wantCode {
		n.t.Errorf("kubectl netready explain %s exited %d, want %d:\n%s", pod, code, wantCode, out)
	}
	for _, p := range parts {
		if !strings.Contains(out, p) {
			n.t.Errorf("kubectl netready explain %s does not say %q:\n%s", pod, p, out)
		}
	}
	return out
}

// editKustomization rewrites the node's kustomization, as an operator
// edits theirs.
func (n *k8sNode) editKustomization(dir string, edit func(string) string) {
	n.t.Helper()
	path := filepath.Join(dir, "kustomization.yaml")
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(edit(string(data))), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// entryConfigMap is the name of the entry ConfigMap the DaemonSet mounts.
func (n *k8sNode) entryConfigMap() string {
	ds, err := n.Admin.AppsV1().DaemonSets("kube-system").Get(context.Background(), "netready", metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "entry" && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	n.t.Fatal("the DaemonSet mounts no entry ConfigMap")
	return ""
}

// TestNode: netready deployed the way the README's Quick start says, on a
// real single-node Kubernetes (kubelet, containerd, controller-manager,
// scheduler): from the release archive `make test` built, with its version
// tag, composed with the calico and pool components. Each scenario prints
// its timing.
func TestNode(t *testing.T) {
	readme, _ := os.ReadFile("../../README.md")
	for _, c := range quickStart.commands {
		if !strings.Contains(string(readme), c) {
			t.Errorf("README.md's Quick start lacks %q, which TestNode runs", c)
		}
	}
	kust, _ := os.ReadFile("../node/kustomization.yaml")
	for _, l := range quickStart.kustomization {
		if !strings.Contains(string(readme), l) {
			t.Errorf("%q is not in README.md's Quick start", l)
		}
	}
	for _, l := range quickStart.node {
		if !strings.Contains(string(kust), "\n"+l+"\n") {
			t.Errorf("%q is not in test/node/kustomization.yaml", l)
		}
	}
	if !strings.Contains(string(readme), "add `deploy/components/pool` to `components`") {
		t.Error("README.md's Quick start does not say when to add the pool component, which TestNode adds")
	}
	_, version := releaseDir(t)
	start := time.Now()
	n := startNode(t)
	t.Logf("node: Ready %.1fs after start", time.Since(start).Seconds())
	hb := startHeartbeat(t, n.path("agent/heartbeat"))
	dir := n.unpackRelease()
	// Runs before the node's teardown: what an operator would look at.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		n.t = t
		for _, args := range [][]string{{"get", "pods", "-A", "-o", "wide"}, {"-n", "kube-system", "describe", "pods", "-l", "app=netready"}, {"get", "events", "-A"}} {
			out, _ := exec.Command(filepath.Join(n.bins, "kubectl"), append([]string{"--kubeconfig", n.path("pki/admin.kubeconfig"), "--cache-dir", n.path("kubectl-cache")}, args...)...).CombinedOutput()
			t.Logf("kubectl %s:\n%s", strings.Join(args, " "), tail(string(out), 60))
		}
		logs, _ := filepath.Glob(n.path("pod-logs/kube-system_netready-*/*/*.log"))
		for _, l := range logs {
			data, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, tail(string(data), 30))
		}
		data, _ := os.ReadFile(n.path("netready.log"))
		t.Logf("netready.log:\n%s", tail(string(data), 30))
	})
	ctx := context.Background()

	t.Run("install", func(t *testing.T) {
		n.t = t
		applied := time.Now()
		n.kubectl("apply", "-k", dir, "--server-side")
		n.kubectl("-n", "kube-system", "rollout", "status", "daemonset/netready", "--timeout=2m")
		// rollout status can return on a DaemonSet status computed before
		// the pod's readiness probe ran (seen once: the pod turned Ready
		// seconds later); the pod itself must turn Ready.
		var pods *corev1.PodList
		n.waitFor("the netready pod Ready", time.Minute, func() bool {
			pods, _ = n.Admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=netready"})
			return pods != nil && len(pods.Items) == 1 && podReady(&pods.Items[0])
		})
		if len(pods.Items) != 1 || !podReady(&pods.Items[0]) || pods.Items[0].Spec.Containers[0].Image != "ghcr.io/netready/netready:"+version {
			t.Fatalf("want one Ready netready pod running ghcr.io/netready/netready:%s, got %+v", version, pods.Items)
		}
		for _, c := range pods.Items[0].Spec.Containers {
			if sc := c.SecurityContext; sc == nil || sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("container %s runs privileged or may escalate: %+v", c.Name, sc)
			}
		}
		n.waitFor("netready in the node's conflist", time.Minute, func() bool { return n.entry() != nil })
		n.waitFor("containerd loading the new conflist", time.Minute, n.runtimeHasNetready)
		t.Logf("install: DaemonSet Ready and entry in the conflist %.1fs after kubectl apply -k", time.Since(applied).Seconds())
		if e := n.entry(); e["preset"] != "calico" || e["status"] == nil {
			t.Errorf("the entry does not carry the calico and pool components: %v", e)
		}
		plugin, err := os.ReadFile(filepath.Join(n.BinDir, "netready"))
		if err != nil || !bytes.Contains(plugin, []byte(version)) {
			t.Errorf("the plugin binary in the runtime's bin dir is not the release's %s: %v", version, err)
		}
		n.program("first")
		created := time.Now()
		n.createPod(nodePod("first", false))
		p := n.waitPod("first", "Running", time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		t.Logf("install: the next pod Running %.1fs after create", time.Since(created).Seconds())
		if m := n.markerFor(p); m == nil || m.State != marker.StateReady {
			t.Errorf("no ready marker for the first pod after install: %+v", m)
		}
		log, _ := os.ReadFile(n.path("netready.log"))
		if !strings.Contains(string(log), "ADD done") || !strings.Contains(string(log), "version="+version) {
			t.Errorf("netready's log shows no ADD by version %s:\n%s", version, log)
		}
	})

	t.Run("quick start: a gated pod Ready", func(t *testing.T) {
		n.t = t
		n.kubectl("create", "namespace", "demo")
		n.kubectl("label", "namespace", "demo", "netready.io/readiness-gate=enabled")
		n.programIn("demo", "web")
		// The Quick start runs registry.k8s.io/pause; the node has no
		// registry, so the same pause image comes from its own store.
		n.kubectl("-n", "demo", "run", "web", "--image=netready.test/pause:1", "--image-pull-policy=Never")
		n.kubectl("-n", "demo", "wait", "pod/web", "--for=condition=Ready", "--timeout=2m")
		p, err := n.Admin.CoreV1().Pods("demo").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.ReadinessGates) != 1 || p.Spec.ReadinessGates[0].ConditionType != nodeConditionType {
			t.Errorf("readiness gates = %+v, want the one the mutating policy adds for %s", p.Spec.ReadinessGates, nodeConditionType)
		}
		if c := publish.Current(p, nodeConditionType); c == nil || c.Status != corev1.ConditionTrue || c.Reason != publish.ReasonProgrammed {
			t.Errorf("condition = %+v, want True, %s", c, publish.ReasonProgrammed)
		}
	})

	t.Run("ungated pod", func(t *testing.T) {
		n.t = t
		n.program("plain")
		n.createPod(nodePod("plain", false))
		p := n.waitPod("plain", "Ready", time.Minute, podReady)
		if m := n.markerFor(p); m == nil {
			t.Error("the ungated pod has no marker")
		}
		if c := publish.Current(p, nodeConditionType); c != nil {
			t.Errorf("the ungated pod got the condition %+v", c)
		}
	})

	t.Run("gated pod, slow agent, onTimeout fail", func(t *testing.T) {
		n.t = t
		const delay = 3 * time.Second
		// A pod the agent never programs: its ADD times out (30 s, fail)
		// while "held" waits and turns Ready beside it, and the timeout
		// must reach the sidecar's metrics though it leaves no marker.
		// Its address is allocated before "held" is created, so that
		// programLater watches held's.
		before := n.allocations()
		n.createPod(nodePod("never", true))
		n.waitFor("the never-programmed pod's address", time.Minute, func() bool { return n.allocations() > before })
		neverAt := time.Now()
		defer func() {
			// Programmed at last, so that kubelet's retry does not hold
			// an ADD for 30 s; then gone, with its address, before the
			// pool scenario counts the pool.
			n.program("never")
			n.Admin.CoreV1().Pods("default").Delete(ctx, "never", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			n.waitFor("the never-programmed pod's address released", 2*time.Minute, func() bool { return n.allocations() <= before+1 })
		}()
		programmed := n.programLater("held", delay)
		created := time.Now()
		n.createPod(nodePod("held", true))
		var wrote time.Time
		runningEarly := false
		for waiting := true; waiting; {
			select {
			case wrote = <-programmed:
				waiting = false
			case <-time.After(100 * time.Millisecond):
				if n.pod("held").Status.Phase == corev1.PodRunning {
					runningEarly = true
				}
			}
		}
		if runningEarly {
			t.Error("the pod ran before its network was programmed: ADD did not hold")
		}
		p := n.waitPod("held", "Ready", time.Minute, podReady)
		readyAt := time.Now()
		t.Logf("fail: agent programmed %.1fs after create; pod Ready %.2fs after that (kubectl get pod -w: ContainerCreating until then)",
			wrote.Sub(created).Seconds(), readyAt.Sub(wrote).Seconds())
		if readyAt.Sub(wrote) > 10*time.Second {
			t.Errorf("Ready %.1fs after the agent programmed the pod", readyAt.Sub(wrote).Seconds())
		}
		if m := n.markerFor(p); m == nil || m.State != marker.StateReady || m.WaitedMs < 1000 {
			t.Errorf("marker = %+v, want ready after a wait", m)
		}
		if c := publish.Current(p, nodeConditionType); c == nil || c.Reason != publish.ReasonProgrammed {
			t.Errorf("condition = %+v", c)
		}
		// The deployed sidecar's own /metrics (host network, loopback).
		const timedOut = `netready_add_wait_seconds_count{network="nr-node",outcome="timeout_fail"} `
		var scrape string
		n.waitFor("a fail-mode timeout in netready_add_wait_seconds", time.Minute, func() bool {
			scrape = nodeMetrics(t)
			return strings.Contains(scrape, timedOut)
		})
		t.Logf("fail: the never-programmed pod's ADD timed out and was counted %.1fs after its address was allocated: %s", time.Since(neverAt).Seconds(),
			strings.TrimSpace(grepLines(scrape, timedOut)))
		if p := n.pod("never"); p.Status.Phase == corev1.PodRunning {
			t.Errorf("the never-programmed pod runs: a fail-mode timeout let its sandbox start")
		}
		checkMetrics(t, scrape)
	})

	t.Run("agent down", func(t *testing.T) {
		n.t = t
		hb.paused.Store(true)
		defer hb.paused.Store(false)
		stale := time.Now()
		var msg string
		n.waitFor("Node NotReady", 2*time.Minute, func() bool {
			var ok bool
			ok, msg = n.ready()
			return !ok && strings.Contains(msg, "netready")
		})
		t.Logf("agent down: Node Ready=False %.1fs after the heartbeat stopped: %s", time.Since(stale).Seconds(), msg)
		if !strings.Contains(msg, "heartbeat") {
			t.Errorf("the Node's message does not carry netready's STATUS message: %s", msg)
		}
		// The scheduler keeps pods off a NotReady node through the taint
		// the node controller adds; a pod created before it lands may be
		// scheduled (seen once).
		n.waitFor("the node controller's not-ready taint", time.Minute, func() bool {
			return slices.ContainsFunc(n.nodeObject().Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		})
		t.Logf("agent down: the scheduler: %s", n.createUnschedulable("later"))
		if p := n.pod("later"); p.Spec.NodeName != "" {
			t.Errorf("the scheduler placed a pod on the NotReady node")
		}
		hb.paused.Store(false)
		back := time.Now()
		n.waitFor("Node Ready again", 2*time.Minute, func() bool { ok, _ := n.ready(); return ok })
		t.Logf("agent down: Node Ready %.1fs after the heartbeat came back", time.Since(back).Seconds())
		n.waitPod("later", "scheduled and Running", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	})

	t.Run("upgrade", func(t *testing.T) {
		n.t = t
		next := filepath.Join(t.TempDir(), "netready-dev2.tar")
		if out, err := exec.Command("../../scripts/image.sh", binDir, "dev2", next).CombinedOutput(); err != nil {
			t.Fatalf("image.sh: %v\n%s", err, out)
		}
		n.importImage(next)
		// An operator's upgrade: a new tag and an entry edit (ADD gives up
		// after 2s and proceeds), applied. The edit alone renames the
		// entry's ConfigMap, which rolls the DaemonSet.
		before := n.entryConfigMap()
		os.WriteFile(filepath.Join(dir, "91-upgrade.json"), []byte(`{"timeout": "2s", "onTimeout": "proceed"}`), 0o644)
		n.editKustomization(dir, func(k string) string {
			return strings.Replace(k, "      - 90-node.json\n", "      - 90-node.json\n      - 91-upgrade.json\n", 1) +
				"images:\n  - name: ghcr.io/netready/netready\n    newTag: dev2\n"
		})
		rolled := time.Now()
		n.kubectl("apply", "-k", dir, "--server-side")
		if after := n.entryConfigMap(); after == before {
			t.Errorf("the DaemonSet still mounts %s after the entry changed", before)
		}
		for i := range 3 {
			name := fmt.Sprintf("roll-%d", i)
			n.program(name)
			n.createPod(nodePod(name, true))
			time.Sleep(700 * time.Millisecond)
		}
		n.waitFor("the DaemonSet rolled to dev2", 2*time.Minute, func() bool {
			pods, _ := n.Admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=netready"})
			return len(pods.Items) == 1 && pods.Items[0].Spec.Containers[0].Image == "ghcr.io/netready/netready:dev2" && podReady(&pods.Items[0])
		})
		n.waitFor("the new entry in place", time.Minute, func() bool { e := n.entry(); return e != nil && e["onTimeout"] == "proceed" })
		t.Logf("upgrade: rolled to dev2 in %.1fs", time.Since(rolled).Seconds())
		for i := range 3 {
			name := fmt.Sprintf("roll-%d", i)
			p := n.waitPod(name, "Ready", time.Minute, podReady)
			if n.markerFor(p) == nil {
				t.Errorf("%s, created during the roll, has no marker", name)
			}
		}
		for _, name := range []string{"held", "plain", "first"} {
			if !podReady(n.pod(name)) {
				t.Errorf("%s is not Ready after the upgrade", name)
			}
		}
		installed, _ := os.ReadFile(filepath.Join(n.BinDir, "netready"))
		built, _ := os.ReadFile(filepath.Join(binDir, "netready"))
		if !bytes.Equal(installed, built) {
			t.Error("the plugin binary in the bin dir is not the image's")
		}
	})

	t.Run("gated pod, slow agent, onTimeout proceed", func(t *testing.T) {
		n.t = t
		// The agent programs the pod only once the test has looked at it
		// waiting: under load a timed agent raced kubectl netready.
		n.createPod(nodePod("proceeding", true))
		p := n.waitPod("proceeding", "Running, not Ready, its condition published", time.Minute, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && !podReady(p) && publish.Current(p, nodeConditionType) != nil
		})
		t.Logf("proceed: kubectl netready explain while the agent has not programmed the pod:\n%s",
			n.explainSays("proceeding", 1, "pod default/proceeding on node nr-node is NOT network-ready",
				"network nr-node (eth0): not programmed; unmet: file /run/nr-node/calico/k8s default%2Fproceeding eth0 (file does not exist (yet))",
				"node:        nr-node", "netready:    pod netready-"))
		if m := n.markerFor(p); m == nil || m.State != marker.StatePending {
			t.Errorf("marker = %+v, want pending", m)
		}
		if c := publish.Current(p, nodeConditionType); c == nil || c.Status != corev1.ConditionFalse {
			t.Logf("condition while pending: %+v", c)
		}
		wrote := time.Now()
		n.program("proceeding")
		p = n.waitPod("proceeding", "Ready", time.Minute, podReady)
		t.Logf("proceed: pod Running unready, then Ready %.2fs after the agent programmed it", time.Since(wrote).Seconds())
		if m := n.markerFor(p); m == nil || m.State != marker.StateReady {
			t.Errorf("marker after the sidecar's re-check = %+v, want ready", m)
		}
		t.Logf("proceed: kubectl netready explain once it is Ready:\n%s",
			n.explainSays("proceeding", 0, "pod default/proceeding on node nr-node is network-ready", "network nr-node (eth0): programmed", "ms after ADD began"))
		n.explainSays("held", 0, "is network-ready", "network nr-node (eth0): programmed", "ms after ADD began")
	})

	t.Run("pool exhausted: a taint, not NotReady", func(t *testing.T) {
		n.t = t
		n.poolScenario(t)
	})

	t.Run("uninstall", func(t *testing.T) {
		n.t = t
		// A taint for the uninstall to lift (the pool scenario lifted its own).
		node := n.nodeObject()
		if _, err := n.Admin.CoreV1().Nodes().Patch(ctx, nodeName, types.MergePatchType, taint.SpecPatch(node, true), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if taint.Current(n.nodeObject()) == nil {
			t.Fatalf("the node has no %s condition to remove", taint.ConditionType)
		}
		n.editKustomization(dir, func(k string) string {
			return strings.Replace(k, "deploy/components/pool]", "deploy/components/pool, deploy/components/uninstall]", 1)
		})
		n.kubectl("apply", "-k", dir, "--server-side")
		n.kubectl("-n", "kube-system", "rollout", "status", "daemonset/netready", "--timeout=2m")
		n.waitFor("netready out of the conflist", time.Minute, func() bool { return n.entry() == nil })
		n.waitFor("containerd loading the conflist without netready", time.Minute, func() bool { return !n.runtimeHasNetready() })
		if node := n.nodeObject(); taint.Has(node) || taint.Current(node) != nil {
			t.Errorf("after the uninstall roll-out the node still has netready's taint or condition: %+v %+v", node.Spec.Taints, taint.Current(node))
		}
		n.kubectl("-n", "demo", "run", "late", "--image=netready.test/pause:1", "--image-pull-policy=Never")
		if p, _ := n.Admin.CoreV1().Pods("demo").Get(ctx, "late", metav1.GetOptions{}); len(p.Spec.ReadinessGates) != 0 {
			t.Errorf("a pod created while uninstalling got a readiness gate: %+v", p.Spec.ReadinessGates)
		}
		n.kubectl("delete", "-k", dir, "--wait=true")
		n.waitFor("the netready pods gone", 2*time.Minute, func() bool {
			pods, err := n.Admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=netready"})
			return err == nil && len(pods.Items) == 0
		})
		if e := n.entry(); e != nil {
			t.Errorf("netready back in the conflist after delete: %v", e)
		}
		n.createPod(nodePod("after", false))
		p := n.waitPod("after", "Ready without netready", time.Minute, podReady)
		if m := n.markerFor(p); m != nil {
			t.Errorf("a pod created after uninstall has a marker: %+v", m)
		}
	})
	n.t = t
}
