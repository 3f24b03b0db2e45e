//go:build integration

package deploy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// TestReinstallNeedsNoAPIServerRestart runs netready's life on one real
// kube-apiserver that is never restarted, as on a managed control plane:
// kustomize install; uninstall and install again; uninstall and install
// with the Helm chart, as docs/components.md says to switch; and the
// chart uninstalled and installed again. A ConfigMap labelled as the
// params of v0.5 were (netready.io/params=settings), naming another
// condition type, stays in kube-system from the first install on. After
// each install: the real sidecar, run as its pod with --require-scope,
// finds its scope in force within 30 s; a new pod in a labelled namespace
// gets exactly one readiness gate, netready's; and the sidecar may write
// its condition on its node's pods and nothing else.
func TestReinstallNeedsNoAPIServerRestart(t *testing.T) {
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	kc := a.Kubeconfig("admin", kube.AdminToken)
	a.CreateNamespaces(t, "netready-test")
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deploy := harness.RepoPath("deploy")
	chart := harness.RepoPath("charts", "netready")
	helm := func(verb string) []string {
		return []string{verb, "netready", chart, "--namespace", "kube-system"}
	}
	stray := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stray-settings", Namespace: "kube-system",
		Labels: map[string]string{"netready.io/params": "settings"}},
		Data: map[string]string{"serviceAccount": "netready-sidecar", "conditionType": "example.com/stray"}}

	steps := []struct {
		name string
		do   func(t *testing.T)
	}{
		{"kustomize install", func(t *testing.T) {
			a.Kubectl(t, "apply", "-k", deploy, "--server-side", "--force-conflicts")
		}},
		{"with a stray labelled ConfigMap", func(t *testing.T) {
			if _, err := a.Admin.CoreV1().ConfigMaps("kube-system").Create(ctx, stray, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{"kustomize uninstall and install", func(t *testing.T) {
			a.Kubectl(t, "delete", "-k", deploy, "--wait")
			a.Kubectl(t, "apply", "-k", deploy, "--server-side")
		}},
		{"kustomize uninstall, then the chart", func(t *testing.T) {
			a.Kubectl(t, "delete", "-k", deploy, "--wait")
			kube.MustHelm(t, kc, helm("install")...)
		}},
		{"the chart uninstalled and installed", func(t *testing.T) {
			kube.MustHelm(t, kc, "uninstall", "netready", "--namespace", "kube-system", "--wait", "--timeout", "1m")
			kube.MustHelm(t, kc, helm("install")...)
		}},
	}
	for i, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.do(t)
			checkInstalled(t, a, i)
		})
		if t.Failed() {
			return // the next step builds on this one
		}
	}
}

// checkInstalled proves an install on a: the scope check of the real
// sidecar passes within 30 s, a new gated pod gets one gate, and the
// sidecar's writes stay in its lane. Each call makes its own sidecar pod
// and token: an uninstall deletes the ServiceAccount, and with it every
// token of the one before.
func checkInstalled(t *testing.T, a *kube.APIServer, round int) {
	t.Helper()
	ctx := context.Background()
	self := kube.PlainPod("kube-system", fmt.Sprintf("netready-round%d", round), "node-a")
	self.Spec.ServiceAccountName = "netready-sidecar"
	self = a.Create(t, self)
	token := a.BoundToken(t, self)

	start := time.Now()
	listen, logs, stop := kube.RunSidecar(t, a.Kubeconfig(fmt.Sprintf("sidecar%d", round), token), t.TempDir(), "node-a",
		"--require-scope", "--pod-namespace", self.Namespace, "--pod-name", self.Name, "--cni-conf-dir", "")
	why := kube.SidecarReadyz(listen, 30*time.Second, http.StatusOK)
	stop()
	if why != "" {
		t.Fatalf("the sidecar's scope check did not pass within 30 s: /readyz %s\n%s", why, harness.Tail(logs.String(), 20))
	}
	t.Logf("the sidecar found its scope in force %.1fs after it started", time.Since(start).Seconds())

	// The mutating policy loads through an informer of its own: live once
	// a dry run is gated.
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		p, err := a.Admin.CoreV1().Pods("gated").Create(ctx, kube.PlainPod("gated", "probe", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && len(p.Spec.ReadinessGates) > 0 {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("no readiness gate 30 s after the install (%v)", err)
		}
	}
	pod, err := a.Admin.CoreV1().Pods("gated").Create(ctx, kube.PlainPod("gated", fmt.Sprintf("app%d", round), ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.ReadinessGates) != 1 || pod.Spec.ReadinessGates[0].ConditionType != publish.DefaultConditionType {
		t.Errorf("a new pod in a labelled namespace got the readiness gates %v, want exactly one, %s", pod.Spec.ReadinessGates, publish.DefaultConditionType)
	}

	sidecar := kubernetes.NewForConfigOrDie(a.Config(token))
	mine := a.Create(t, kube.PlainPod("default", fmt.Sprintf("mine%d", round), "node-a"))
	theirs := a.Create(t, kube.PlainPod("default", fmt.Sprintf("theirs%d", round), "node-b"))
	cond := func(p *corev1.Pod, typ string) []byte {
		b, _ := publish.Patch(p.UID, corev1.PodCondition{Type: corev1.PodConditionType(typ), Status: corev1.ConditionTrue,
			Reason: publish.ReasonProgrammed, LastTransitionTime: metav1.Now()})
		return b
	}
	patch := func(p *corev1.Pod, pt types.PatchType, body []byte) error {
		_, err := sidecar.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, pt, body, metav1.PatchOptions{}, "status")
		return err
	}
	if err := patch(mine, types.StrategicMergePatchType, cond(mine, publish.DefaultConditionType)); err != nil {
		t.Errorf("the sidecar setting its condition on a pod of its node = %v, want allowed", err)
	}
	for _, w := range []struct {
		what string
		err  error
		want string
	}{
		{"a label through pods/status", patch(mine, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"hijacked"}}}`)), "may not change labels"},
		{"the stray's condition type", patch(mine, types.StrategicMergePatchType, cond(mine, "example.com/stray")), "may only change the condition " + publish.DefaultConditionType},
		{"a pod of another node", patch(theirs, types.StrategicMergePatchType, cond(theirs, publish.DefaultConditionType)), "may only write pods of its own node"},
	} {
		if w.err == nil || !strings.Contains(w.err.Error(), w.want) {
			t.Errorf("the sidecar writing %s = %v, want refused with %q", w.what, w.err, w.want)
		}
	}
	if _, err := sidecar.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); err == nil {
		t.Error("the sidecar labelled another Node")
	}
}
