//go:build integration

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
)

// chartScenario installs netready again, after the kustomize uninstall,
// from the release's chart (netready-VERSION.tgz) with the values of the
// node's kustomization: the calico preset, the pool, the node's condition
// type and its entry fragment as values; its DaemonSet patch (the test
// node's folders and API server) through a post-renderer, as an operator
// patches what no value covers. The next gated pod must turn Ready; an
// upgrade with uninstall=true must take netready out of the conflist, and
// helm uninstall the DaemonSet and its pod.
func chartScenario(n *harness.K8sNode, t *testing.T, dir string) {
	dist, version := harness.ReleaseDir(t)
	ctx := context.Background()
	kc := n.Path("pki/admin.kubeconfig")

	// 90-node.json as values: timeout and onTimeout have their own.
	var entry map[string]any
	data, err := os.ReadFile(filepath.Join(dir, "90-node.json"))
	if err != nil || json.Unmarshal(data, &entry) != nil {
		t.Fatalf("the node's entry fragment: %v\n%s", err, data)
	}
	values := map[string]any{
		"preset": "calico", "pool": map[string]any{"enabled": true},
		"conditionType": harness.NodeConditionType,
		"timeout":       entry["timeout"], "onTimeout": entry["onTimeout"],
	}
	delete(entry, "timeout")
	delete(entry, "onTimeout")
	values["entry"] = entry
	vdata, _ := yaml.Marshal(values)
	vfile := filepath.Join(dir, "chart-values.yaml")
	post := filepath.Join(dir, "post-render.sh")
	script := fmt.Sprintf(`#!/bin/sh
# Helm's render on stdin, patched as the node's kustomization patches deploy/.
set -e
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cat > "$d/all.yaml"
cp %q "$d/daemonset.yaml"
printf 'resources: [all.yaml]\npatches: [{path: daemonset.yaml}]\n' > "$d/kustomization.yaml"
%q kustomize "$d"
`, filepath.Join(dir, "daemonset.yaml"), filepath.Join(n.Bins, "kubectl"))
	if os.WriteFile(vfile, vdata, 0o644) != nil || os.WriteFile(post, []byte(script), 0o755) != nil {
		t.Fatal("writing the chart's values and post-renderer")
	}

	installed := time.Now()
	harness.MustHelm(t, kc, "install", "netready", filepath.Join(dist, "netready-"+version+".tgz"), "--namespace", "kube-system",
		"-f", vfile, "--post-renderer", post)
	awaitScopeAfterReinstall(t, n)
	n.Kubectl("-n", "kube-system", "rollout", "status", "daemonset/netready", "--timeout=2m")
	n.WaitFor("netready in the node's conflist", time.Minute, func() bool { return n.Entry() != nil })
	n.WaitFor("containerd loading the new conflist", time.Minute, n.RuntimeHasNetready)
	t.Logf("chart: DaemonSet Ready and entry in the conflist %.1fs after helm install", time.Since(installed).Seconds())
	if e := n.Entry(); e["preset"] != "calico" || e["status"] == nil || e["onTimeout"] != values["onTimeout"] {
		t.Errorf("the entry the chart installed lacks its values: %v", e)
	}
	pods, err := n.Admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=netready"})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.Containers[0].Image != "ghcr.io/netready/netready:"+version {
		t.Fatalf("want one netready pod running ghcr.io/netready/netready:%s, got %v %v", version, pods, err)
	}

	n.ProgramIn("demo", "charted")
	n.Kubectl("-n", "demo", "run", "charted", "--image=netready.test/pause:1", "--image-pull-policy=Never")
	n.Kubectl("-n", "demo", "wait", "pod/charted", "--for=condition=Ready", "--timeout=2m")
	p, err := n.Admin.CoreV1().Pods("demo").Get(ctx, "charted", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.ReadinessGates) != 1 || p.Spec.ReadinessGates[0].ConditionType != harness.NodeConditionType {
		t.Errorf("readiness gates = %+v, want the chart's mutating policy's for %s", p.Spec.ReadinessGates, harness.NodeConditionType)
	}
	if c := publish.Current(p, harness.NodeConditionType); c == nil || c.Status != corev1.ConditionTrue || c.Reason != publish.ReasonProgrammed {
		t.Errorf("condition = %+v, want True, %s", c, publish.ReasonProgrammed)
	}

	// The chart's uninstall: uninstall=true takes netready off the node,
	// then helm uninstall takes the rest.
	harness.MustHelm(t, kc, "upgrade", "netready", filepath.Join(dist, "netready-"+version+".tgz"), "--namespace", "kube-system",
		"--reuse-values", "--set", "uninstall=true", "--post-renderer", post)
	n.Kubectl("-n", "kube-system", "rollout", "status", "daemonset/netready", "--timeout=2m")
	n.WaitFor("netready out of the conflist", time.Minute, func() bool { return n.Entry() == nil })
	n.WaitFor("containerd loading the conflist without netready", time.Minute, func() bool { return !n.RuntimeHasNetready() })
	out := harness.MustHelm(t, kc, "uninstall", "netready", "--namespace", "kube-system", "--wait", "--timeout", "2m")
	n.WaitFor("the netready pods gone after helm uninstall", 2*time.Minute, func() bool {
		pods, err := n.Admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=netready"})
		return err == nil && len(pods.Items) == 0
	})
	if !strings.Contains(out, "uninstalled") {
		t.Errorf("helm uninstall: %s", out)
	}
	if e := n.Entry(); e != nil {
		t.Errorf("netready back in the conflist after helm uninstall: %v", e)
	}
}

// awaitScopeAfterReinstall waits for the reinstalled sidecar to find its
// scope in force. kube-apiserver 1.36 stops reading a policy's ConfigMap
// params for good once the policy had no binding for a moment, as after
// the kustomize uninstall (kubernetes/kubernetes#130887): the policies
// then refuse nothing, so the sidecar must hold every write and say what
// to do, until the restart its message asks for. An API server without
// that bug lets the sidecar go Ready at once.
func awaitScopeAfterReinstall(t *testing.T, n *harness.K8sNode) {
	held := func() string {
		logs, _ := filepath.Glob(n.Path("pod-logs/kube-system_netready-*/sidecar/*.log"))
		for _, l := range logs {
			if data, err := os.ReadFile(l); err == nil && strings.Contains(string(data), "not writing anything until the sidecar's scope is enforced") {
				return string(data)
			}
		}
		return ""
	}
	ready := func() bool {
		pods, err := n.Admin.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app=netready"})
		return err == nil && len(pods.Items) == 1 && harness.PodReady(&pods.Items[0])
	}
	var log string
	n.WaitFor("the new sidecar Ready, or holding its writes", 2*time.Minute, func() bool {
		log = held()
		return log != "" || ready()
	})
	if log == "" {
		t.Log("chart: the sidecar found its scope in force at once (this API server keeps reading the params)")
		return
	}
	if !strings.Contains(log, "kubernetes/kubernetes#130887") || !strings.Contains(log, "restart kube-apiserver") {
		t.Errorf("the sidecar holds its writes without naming the API server's bug and the restart:\n%s", log)
	}
	if ready() {
		t.Fatal("the sidecar is Ready while its scope is not in force")
	}
	// The gate's mutating policy reads the same lost params: a pod created
	// now gets no gate, so the sidecar's silence holds none back.
	n.ProgramIn("demo", "while-held")
	n.Kubectl("-n", "demo", "run", "while-held", "--image=netready.test/pause:1", "--image-pull-policy=Never")
	n.Kubectl("-n", "demo", "wait", "pod/while-held", "--for=condition=Ready", "--timeout=2m")
	if p, err := n.Admin.CoreV1().Pods("demo").Get(context.Background(), "while-held", metav1.GetOptions{}); err != nil || len(p.Spec.ReadinessGates) != 0 {
		t.Errorf("a pod created while the sidecar holds its writes: gates %v, err %v; want none", p.Spec.ReadinessGates, err)
	}
	t.Log("chart: the reinstalled sidecar holds its writes (kubernetes#130887); restarting kube-apiserver, as its message says")
	n.RestartAPIServer()
}
