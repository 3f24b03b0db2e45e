//go:build integration

package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

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

// quickStart holds the README's Quick start: the commands TestQuickStartWorksOnARealNode runs
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
	node:          []string{"resources: [deploy]", "components: [deploy/components/calico, deploy/components/condition-type, deploy/components/pool]"},
}

// TestQuickStartWorksOnARealNode: netready deployed the way the README's Quick start says, on a
// real single-node Kubernetes (kubelet, containerd, controller-manager,
// scheduler): from the release archive `make test` built, with its version
// tag, composed with the calico and pool components. Each scenario prints
// its timing.
func TestQuickStartWorksOnARealNode(t *testing.T) {
	readme, _ := os.ReadFile("../../../README.md")
	for _, c := range quickStart.commands {
		if !strings.Contains(string(readme), c) {
			t.Errorf("README.md's Quick start lacks %q, which TestQuickStartWorksOnARealNode runs", c)
		}
	}
	kust, _ := os.ReadFile("../../node/kustomization.yaml")
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
		t.Error("README.md's Quick start does not say when to add the pool component, which TestQuickStartWorksOnARealNode adds")
	}
	_, version := harness.ReleaseDir(t)
	start := time.Now()
	n := kube.StartNode(t)
	t.Logf("node: Ready %.1fs after start", time.Since(start).Seconds())
	hb := kube.StartHeartbeat(t, n.Path("agent/heartbeat"))
	dir := n.UnpackRelease()
	// Runs before the node's teardown: what an operator would look at.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		n.T = t
		for _, args := range [][]string{{"get", "pods", "-A", "-o", "wide"}, {"-n", "kube-system", "describe", "pods", "-l", "app=netready"}, {"get", "events", "-A"}} {
			out, _ := exec.Command(filepath.Join(n.Bins, "kubectl"), append([]string{"--kubeconfig", n.Path("pki/admin.kubeconfig"), "--cache-dir", n.Path("kubectl-cache")}, args...)...).CombinedOutput()
			t.Logf("kubectl %s:\n%s", strings.Join(args, " "), harness.Tail(string(out), 60))
		}
		logs, _ := filepath.Glob(n.Path("pod-logs/kube-system_netready-*/*/*.log"))
		for _, l := range logs {
			data, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, harness.Tail(string(data), 30))
		}
		data, _ := os.ReadFile(n.Path("netready.log"))
		t.Logf("netready.log:\n%s", harness.Tail(string(data), 30))
	})
	ctx := context.Background()

	t.Run("install", func(t *testing.T) {
		n.T = t
		applied := time.Now()
		n.Kubectl("apply", "-k", dir, "--server-side")
		n.Kubectl("-n", "kube-system", "rollout", "status", "daemonset/netready", "--timeout=2m")
		// rollout status can return on a DaemonSet status computed before
		// the pod's readiness probe ran (seen once: the pod turned Ready
		// seconds later); the pod itself must turn Ready.
		var pods *corev1.PodList
		n.WaitFor("the netready pod Ready", time.Minute, func() bool {
			pods, _ = n.Admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=netready"})
			return pods != nil && len(pods.Items) == 1 && kube.PodReady(&pods.Items[0])
		})
		if len(pods.Items) != 1 || !kube.PodReady(&pods.Items[0]) || pods.Items[0].Spec.Containers[0].Image != "ghcr.io/netready/netready:"+version {
			t.Fatalf("want one Ready netready pod running ghcr.io/netready/netready:%s, got %+v", version, pods.Items)
		}
		for _, c := range pods.Items[0].Spec.Containers {
			if sc := c.SecurityContext; sc == nil || sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("container %s runs privileged or may escalate: %+v", c.Name, sc)
			}
		}
		n.WaitFor("netready in the node's conflist", time.Minute, func() bool { return n.Entry() != nil })
		n.WaitFor("containerd loading the new conflist", time.Minute, n.RuntimeHasNetready)
		t.Logf("install: DaemonSet Ready and entry in the conflist %.1fs after kubectl apply -k", time.Since(applied).Seconds())
		if e := n.Entry(); e["preset"] != "calico" || e["status"] == nil {
			t.Errorf("the entry does not carry the calico and pool components: %v", e)
		}
		plugin, err := os.ReadFile(filepath.Join(n.BinDir, "netready"))
		if err != nil || !bytes.Contains(plugin, []byte(version)) {
			t.Errorf("the plugin binary in the runtime's bin dir is not the release's %s: %v", version, err)
		}
		n.Program("first")
		created := time.Now()
		n.CreatePod(kube.NodePod("first", false))
		p := n.WaitPod("first", "Running", time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		t.Logf("install: the next pod Running %.1fs after create", time.Since(created).Seconds())
		if m := n.MarkerFor(p); m == nil || m.State != marker.StateReady {
			t.Errorf("no ready marker for the first pod after install: %+v", m)
		}
		log, _ := os.ReadFile(n.Path("netready.log"))
		if !strings.Contains(string(log), "ADD done") || !strings.Contains(string(log), "version="+version) {
			t.Errorf("netready's log shows no ADD by version %s:\n%s", version, log)
		}
	})

	t.Run("quick start: a gated pod Ready", func(t *testing.T) {
		n.T = t
		n.Kubectl("create", "namespace", "demo")
		n.Kubectl("label", "namespace", "demo", "netready.io/readiness-gate=enabled")
		n.ProgramIn("demo", "web")
		// The Quick start runs registry.k8s.io/pause; the node has no
		// registry, so the same pause image comes from its own store.
		n.Kubectl("-n", "demo", "run", "web", "--image=netready.test/pause:1", "--image-pull-policy=Never")
		n.Kubectl("-n", "demo", "wait", "pod/web", "--for=condition=Ready", "--timeout=2m")
		p, err := n.Admin.CoreV1().Pods("demo").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.ReadinessGates) != 1 || p.Spec.ReadinessGates[0].ConditionType != kube.NodeConditionType {
			t.Errorf("readiness gates = %+v, want the one the mutating policy adds for %s", p.Spec.ReadinessGates, kube.NodeConditionType)
		}
		if c := publish.Current(p, kube.NodeConditionType); c == nil || c.Status != corev1.ConditionTrue || c.Reason != publish.ReasonProgrammed {
			t.Errorf("condition = %+v, want True, %s", c, publish.ReasonProgrammed)
		}
	})

	t.Run("ungated pod", func(t *testing.T) {
		n.T = t
		n.Program("plain")
		n.CreatePod(kube.NodePod("plain", false))
		p := n.WaitPod("plain", "Ready", time.Minute, kube.PodReady)
		if m := n.MarkerFor(p); m == nil {
			t.Error("the ungated pod has no marker")
		}
		if c := publish.Current(p, kube.NodeConditionType); c != nil {
			t.Errorf("the ungated pod got the condition %+v", c)
		}
	})

	t.Run("gated pod, slow agent, onTimeout fail", func(t *testing.T) {
		n.T = t
		const delay = 3 * time.Second
		// A pod the agent never programs: its ADD times out (30 s, fail)
		// while "held" waits and turns Ready beside it, and the timeout
		// must reach the sidecar's metrics though it leaves no marker.
		// Its address is allocated before "held" is created, so that
		// ProgramLater watches held's.
		before := n.Allocations()
		n.CreatePod(kube.NodePod("never", true))
		n.WaitFor("the never-programmed pod's address", time.Minute, func() bool { return n.Allocations() > before })
		neverAt := time.Now()
		defer func() {
			// Programmed at last, so that kubelet's retry does not hold
			// an ADD for 30 s; then gone, with its address, before the
			// pool scenario counts the pool.
			n.Program("never")
			n.Admin.CoreV1().Pods("default").Delete(ctx, "never", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			n.WaitFor("the never-programmed pod's address released", 2*time.Minute, func() bool { return n.Allocations() <= before+1 })
		}()
		programmed := n.ProgramLater("held", delay)
		created := time.Now()
		n.CreatePod(kube.NodePod("held", true))
		var wrote time.Time
		runningEarly := false
		for waiting := true; waiting; {
			select {
			case wrote = <-programmed:
				waiting = false
			case <-time.After(100 * time.Millisecond):
				if n.Pod("held").Status.Phase == corev1.PodRunning {
					runningEarly = true
				}
			}
		}
		if runningEarly {
			t.Error("the pod ran before its network was programmed: ADD did not hold")
		}
		p := n.WaitPod("held", "Ready", time.Minute, kube.PodReady)
		readyAt := time.Now()
		t.Logf("fail: agent programmed %.1fs after create; pod Ready %.2fs after that (kubectl get pod -w: ContainerCreating until then)",
			wrote.Sub(created).Seconds(), readyAt.Sub(wrote).Seconds())
		if readyAt.Sub(wrote) > 10*time.Second {
			t.Errorf("Ready %.1fs after the agent programmed the pod", readyAt.Sub(wrote).Seconds())
		}
		if m := n.MarkerFor(p); m == nil || m.State != marker.StateReady || m.WaitedMs < 1000 {
			t.Errorf("marker = %+v, want ready after a wait", m)
		}
		if c := publish.Current(p, kube.NodeConditionType); c == nil || c.Reason != publish.ReasonProgrammed {
			t.Errorf("condition = %+v", c)
		}
		// The deployed sidecar's own /metrics (host network, loopback).
		const timedOut = `netready_add_wait_seconds_count{network="nr-node",outcome="timeout_fail"} `
		var scrape string
		n.WaitFor("a fail-mode timeout in netready_add_wait_seconds", time.Minute, func() bool {
			scrape = nodeMetrics(t)
			return strings.Contains(scrape, timedOut)
		})
		t.Logf("fail: the never-programmed pod's ADD timed out and was counted %.1fs after its address was allocated: %s", time.Since(neverAt).Seconds(),
			strings.TrimSpace(harness.GrepLines(scrape, timedOut)))
		if p := n.Pod("never"); p.Status.Phase == corev1.PodRunning {
			t.Errorf("the never-programmed pod runs: a fail-mode timeout let its sandbox start")
		}
		kube.CheckMetrics(t, scrape)
	})

	t.Run("agent down", func(t *testing.T) {
		n.T = t
		hb.Paused.Store(true)
		defer hb.Paused.Store(false)
		stale := time.Now()
		var msg string
		n.WaitFor("Node NotReady", 2*time.Minute, func() bool {
			var ok bool
			ok, msg = n.Ready()
			return !ok && strings.Contains(msg, "netready")
		})
		t.Logf("agent down: Node Ready=False %.1fs after the heartbeat stopped: %s", time.Since(stale).Seconds(), msg)
		if !strings.Contains(msg, "heartbeat") {
			t.Errorf("the Node's message does not carry netready's STATUS message: %s", msg)
		}
		// The scheduler keeps pods off a NotReady node through the taint
		// the node controller adds; a pod created before it lands may be
		// scheduled (seen once).
		n.WaitFor("the node controller's not-ready taint", time.Minute, func() bool {
			return slices.ContainsFunc(nodeObject(n).Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		})
		t.Logf("agent down: the scheduler: %s", n.CreateUnschedulable("later"))
		if p := n.Pod("later"); p.Spec.NodeName != "" {
			t.Errorf("the scheduler placed a pod on the NotReady node")
		}
		hb.Paused.Store(false)
		back := time.Now()
		n.WaitFor("Node Ready again", 2*time.Minute, func() bool { ok, _ := n.Ready(); return ok })
		t.Logf("agent down: Node Ready %.1fs after the heartbeat came back", time.Since(back).Seconds())
		n.WaitPod("later", "scheduled and Running", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	})

	t.Run("upgrade", func(t *testing.T) {
		n.T = t
		next := filepath.Join(t.TempDir(), "netready-dev2.tar")
		if out, err := exec.Command("../../../scripts/image.sh", harness.BinDir, "dev2", next).CombinedOutput(); err != nil {
			t.Fatalf("image.sh: %v\n%s", err, out)
		}
		n.ImportImage(next)
		// An operator's upgrade: a new tag and an entry edit (ADD gives up
		// after 2s and proceeds), applied. The edit alone renames the
		// entry's ConfigMap, which rolls the DaemonSet.
		before := n.EntryConfigMap()
		os.WriteFile(filepath.Join(dir, "91-upgrade.json"), []byte(`{"timeout": "2s", "onTimeout": "proceed"}`), 0o644)
		n.EditKustomization(dir, func(k string) string {
			return strings.Replace(k, "      - 90-node.json\n", "      - 90-node.json\n      - 91-upgrade.json\n", 1) +
				"images:\n  - name: ghcr.io/netready/netready\n    newTag: dev2\n"
		})
		rolled := time.Now()
		n.Kubectl("apply", "-k", dir, "--server-side")
		if after := n.EntryConfigMap(); after == before {
			t.Errorf("the DaemonSet still mounts %s after the entry changed", before)
		}
		for i := range 3 {
			name := fmt.Sprintf("roll-%d", i)
			n.Program(name)
			n.CreatePod(kube.NodePod(name, true))
			time.Sleep(700 * time.Millisecond)
		}
		n.WaitFor("the DaemonSet rolled to dev2", 2*time.Minute, func() bool {
			pods, _ := n.Admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=netready"})
			return len(pods.Items) == 1 && pods.Items[0].Spec.Containers[0].Image == "ghcr.io/netready/netready:dev2" && kube.PodReady(&pods.Items[0])
		})
		n.WaitFor("the new entry in place", time.Minute, func() bool { e := n.Entry(); return e != nil && e["onTimeout"] == "proceed" })
		t.Logf("upgrade: rolled to dev2 in %.1fs", time.Since(rolled).Seconds())
		for i := range 3 {
			name := fmt.Sprintf("roll-%d", i)
			p := n.WaitPod(name, "Ready", time.Minute, kube.PodReady)
			if n.MarkerFor(p) == nil {
				t.Errorf("%s, created during the roll, has no marker", name)
			}
		}
		for _, name := range []string{"held", "plain", "first"} {
			if !kube.PodReady(n.Pod(name)) {
				t.Errorf("%s is not Ready after the upgrade", name)
			}
		}
		installed, _ := os.ReadFile(filepath.Join(n.BinDir, "netready"))
		built, _ := os.ReadFile(filepath.Join(harness.BinDir, "netready"))
		if !bytes.Equal(installed, built) {
			t.Error("the plugin binary in the bin dir is not the image's")
		}
	})

	t.Run("gated pod, slow agent, onTimeout proceed", func(t *testing.T) {
		n.T = t
		// The agent programs the pod only once the test has looked at it
		// waiting: under load a timed agent raced kubectl netready.
		n.CreatePod(kube.NodePod("proceeding", true))
		p := n.WaitPod("proceeding", "Running, not Ready, its condition published", time.Minute, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && !kube.PodReady(p) && publish.Current(p, kube.NodeConditionType) != nil
		})
		t.Logf("proceed: kubectl netready explain while the agent has not programmed the pod:\n%s",
			n.ExplainSays("proceeding", 1, "pod default/proceeding on node nr-node is NOT network-ready",
				"network nr-node (eth0): not programmed; unmet: file /run/nr-node/calico/k8s default%2Fproceeding eth0 (file does not exist (yet))",
				"node:        nr-node", "netready:    pod netready-"))
		if m := n.MarkerFor(p); m == nil || m.State != marker.StatePending {
			t.Errorf("marker = %+v, want pending", m)
		}
		if c := publish.Current(p, kube.NodeConditionType); c == nil || c.Status != corev1.ConditionFalse {
			t.Logf("condition while pending: %+v", c)
		}
		wrote := time.Now()
		n.Program("proceeding")
		p = n.WaitPod("proceeding", "Ready", time.Minute, kube.PodReady)
		t.Logf("proceed: pod Running unready, then Ready %.2fs after the agent programmed it", time.Since(wrote).Seconds())
		if m := n.MarkerFor(p); m == nil || m.State != marker.StateReady {
			t.Errorf("marker after the sidecar's re-check = %+v, want ready", m)
		}
		t.Logf("proceed: kubectl netready explain once it is Ready:\n%s",
			n.ExplainSays("proceeding", 0, "pod default/proceeding on node nr-node is network-ready", "network nr-node (eth0): programmed", "ms after ADD began"))
		n.ExplainSays("held", 0, "is network-ready", "network nr-node (eth0): programmed", "ms after ADD began")
	})

	t.Run("off switch: pods start and turn Ready while a check can never be met", func(t *testing.T) {
		n.T = t
		offSwitchScenario(n, t)
	})

	t.Run("pool exhausted: a taint, not NotReady", func(t *testing.T) {
		n.T = t
		poolScenario(n, t)
	})

	t.Run("uninstall", func(t *testing.T) {
		n.T = t
		// A taint for the uninstall to lift (the pool scenario lifted its own).
		node := nodeObject(n)
		if _, err := n.Admin.CoreV1().Nodes().Patch(ctx, kube.NodeName, types.MergePatchType, nodewriter.SpecPatch(node, true), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if nodewriter.Current(nodeObject(n)) == nil {
			t.Fatalf("the node has no %s condition to remove", nodewriter.ConditionType)
		}
		n.RollOutUninstall(dir)
		if node := nodeObject(n); nodewriter.Has(node) || nodewriter.Current(node) != nil {
			t.Errorf("after the uninstall roll-out the node still has netready's taint or condition: %+v %+v", node.Spec.Taints, nodewriter.Current(node))
		}
		n.Kubectl("-n", "demo", "run", "late", "--image=netready.test/pause:1", "--image-pull-policy=Never")
		if p, _ := n.Admin.CoreV1().Pods("demo").Get(ctx, "late", metav1.GetOptions{}); len(p.Spec.ReadinessGates) != 0 {
			t.Errorf("a pod created while uninstalling got a readiness gate: %+v", p.Spec.ReadinessGates)
		}
		n.DeleteNetready(dir)
		if e := n.Entry(); e != nil {
			t.Errorf("netready back in the conflist after delete: %v", e)
		}
		n.CreatePod(kube.NodePod("after", false))
		p := n.WaitPod("after", "Ready without netready", time.Minute, kube.PodReady)
		if m := n.MarkerFor(p); m != nil {
			t.Errorf("a pod created after uninstall has a marker: %+v", m)
		}
	})

	t.Run("the release's chart installs it again", func(t *testing.T) {
		n.T = t
		chartScenario(n, t, dir)
	})
	n.T = t
}
