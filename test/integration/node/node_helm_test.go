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

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// chartScenario installs netready again, after the kustomize uninstall,
// from the release's chart (netready-VERSION.tgz) with the values of the
// node's kustomization: the calico preset, the pool, the node's condition
// type and its entry fragment as values; its DaemonSet patch (the test
// node's folders and API server) through a post-renderer, as an operator
// patches what no value covers. The next gated pod must turn Ready; an
// upgrade with uninstall=true must take netready out of the conflist, and
// helm uninstall the DaemonSet and its pod.
func chartScenario(n *kube.K8sNode, t *testing.T, dir string) {
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
		"conditionType": kube.NodeConditionType,
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
	kube.MustHelm(t, kc, "install", "netready", filepath.Join(dist, "netready-"+version+".tgz"), "--namespace", "kube-system",
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
	if len(p.Spec.ReadinessGates) != 1 || p.Spec.ReadinessGates[0].ConditionType != kube.NodeConditionType {
		t.Errorf("readiness gates = %+v, want the chart's mutating policy's for %s", p.Spec.ReadinessGates, kube.NodeConditionType)
	}
	if c := publish.Current(p, kube.NodeConditionType); c == nil || c.Status != corev1.ConditionTrue || c.Reason != publish.ReasonProgrammed {
		t.Errorf("condition = %+v, want True, %s", c, publish.ReasonProgrammed)
	}

	// The chart's uninstall: uninstall=true takes netready off the node,
	// then helm uninstall takes the rest.
	kube.MustHelm(t, kc, "upgrade", "netready", filepath.Join(dist, "netready-"+version+".tgz"), "--namespace", "kube-system",
		"--reuse-values", "--set", "uninstall=true", "--post-renderer", post)
	n.Kubectl("-n", "kube-system", "rollout", "status", "daemonset/netready", "--timeout=2m")
	n.WaitFor("netready out of the conflist", time.Minute, func() bool { return n.Entry() == nil })
	n.WaitFor("containerd loading the conflist without netready", time.Minute, func() bool { return !n.RuntimeHasNetready() })
	out := kube.MustHelm(t, kc, "uninstall", "netready", "--namespace", "kube-system", "--wait", "--timeout", "2m")
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

// awaitScopeAfterReinstall: the reinstalled sidecar finds its scope in
// force, on the API server that served the kustomize install and
// uninstall, never restarted (kube-apiserver 1.36 kept v0.5's params-bound
// policies from working after a reinstall until a restart,
// kubernetes/kubernetes#130887; no policy has params now). Its pod turns
// Ready within 30 s of the sidecar's start, and a token bound to it, as
// kubelet mints, may set its condition and nothing else.
func awaitScopeAfterReinstall(t *testing.T, n *kube.K8sNode) {
	ctx := context.Background()
	var pod corev1.Pod
	n.WaitFor("the reinstalled sidecar's pod Ready", 2*time.Minute, func() bool {
		pods, err := n.Admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=netready"})
		if err != nil || len(pods.Items) != 1 {
			return false
		}
		pod = pods.Items[0]
		return kube.PodReady(&pod)
	})
	var started, ready time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "sidecar" && cs.State.Running != nil {
			started = cs.State.Running.StartedAt.Time
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.LastTransitionTime.Time
		}
	}
	// Second-granular timestamps: a second's slack.
	if started.IsZero() || ready.Sub(started) > 31*time.Second {
		t.Errorf("the reinstalled sidecar started at %v and turned Ready at %v: want its scope check to pass within 30 s", started, ready)
	}
	t.Logf("chart: the reinstalled sidecar Ready %.0fs after it started, with no API server restart", ready.Sub(started).Seconds())

	exp := int64(600)
	tr, err := n.Admin.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, pod.Spec.ServiceAccountName, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp, BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sidecar := kubernetes.NewForConfigOrDie(&rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", kube.NodeAPIPort), BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: n.Path("pki/ca.crt")}})
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	own, _ := publish.Patch(pod.UID, corev1.PodCondition{Type: kube.NodeConditionType, Status: corev1.ConditionTrue,
		Reason: publish.ReasonProgrammed, LastTransitionTime: metav1.Now()})
	if _, err := sidecar.CoreV1().Pods("kube-system").Patch(ctx, pod.Name, types.StrategicMergePatchType, own, dry, "status"); err != nil {
		t.Errorf("the reinstalled sidecar setting %s on its own pod (dry run) = %v, want allowed", kube.NodeConditionType, err)
	}
	other, _ := publish.Patch(pod.UID, corev1.PodCondition{Type: publish.DefaultConditionType, Status: corev1.ConditionTrue,
		Reason: publish.ReasonProgrammed, LastTransitionTime: metav1.Now()})
	for what, body := range map[string][]byte{
		"a label":                []byte(`{"metadata":{"labels":{"app":"hijacked"}}}`),
		"another condition type": other,
	} {
		if _, err := sidecar.CoreV1().Pods("kube-system").Patch(ctx, pod.Name, types.StrategicMergePatchType, body, dry, "status"); err == nil || !strings.Contains(err.Error(), "netready-sidecar-scope") {
			t.Errorf("the reinstalled sidecar writing %s through pods/status (dry run) = %v, want refused by netready-sidecar-scope", what, err)
		}
	}
}
