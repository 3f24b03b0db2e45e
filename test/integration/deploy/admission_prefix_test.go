//go:build integration

package deploy

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness/kube"
)

// TestDeployNamePrefix applies deploy/ under an overlay that renames
// everything (namePrefix acme-, nameSuffix -x) and moves it to another
// namespace, on the real kube-apiserver. Every scope policy must still
// refuse the renamed sidecar's writes outside its lane, the gate must
// still be injected, and the real sidecar binary, run as its pod with
// --require-scope, must start. Without the binding that names it to the
// policies it must write nothing and say which policies let its dry-run
// probes through.
func TestDeployNamePrefix(t *testing.T) {
	const ns, sa = "netready-system", "acme-netready-sidecar-x"
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	overlay := overlayOf(t, "namePrefix: acme-\nnameSuffix: -x\nnamespace: "+ns+"\n")
	a.CreateNamespaces(t, ns)
	out := a.Kubectl(t, "apply", "-k", overlay, "--server-side")
	for _, want := range []string{"validatingadmissionpolicybinding.admissionregistration.k8s.io/acme-netready-sidecar-scope-x", "serviceaccount/" + sa, "configmap/acme-netready-settings-x"} {
		if !strings.Contains(out, want) {
			t.Fatalf("kubectl apply -k of the acme- overlay did not apply %s:\n%s", want, out)
		}
	}
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	self := kube.PlainPod(ns, "acme-netready-x-abcde", "node-a")
	self.Spec.ServiceAccountName = sa
	self = a.Create(t, self)
	token := a.BoundToken(t, self)
	sidecar := kubernetes.NewForConfigOrDie(a.Config(token))
	mine := a.Create(t, kube.PlainPod("default", "web", "node-a"))
	theirs := a.Create(t, kube.PlainPod("default", "far", "node-b"))
	cond := func(uid types.UID) []byte {
		p, _ := publish.Patch(uid, corev1.PodCondition{Type: publish.DefaultConditionType, Status: corev1.ConditionTrue,
			Reason: publish.ReasonProgrammed, LastTransitionTime: metav1.Now()})
		return p
	}
	patch := func(pod *corev1.Pod, body []byte) error {
		_, err := sidecar.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
		return err
	}
	// The policies load through informers: live once a label change is
	// refused.
	label := []byte(`{"metadata":{"labels":{"app":"hijacked"}}}`)
	for start := time.Now(); patch(mine, label) == nil; time.Sleep(200 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the renamed scope policy never applied to %s", sa)
		}
		a.Admin.CoreV1().Pods("default").Patch(ctx, mine.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"web"}}}`), metav1.PatchOptions{})
	}

	t.Run("every renamed policy refuses the renamed sidecar", func(t *testing.T) {
		if err := patch(mine, cond(mine.UID)); err != nil {
			t.Errorf("its own condition on its own node's pod = %v, want allowed", err)
		}
		if err := patch(theirs, cond(theirs.UID)); err == nil || !strings.Contains(err.Error(), "may only write pods of its own node") {
			t.Errorf("a pod of node-b = %v, want refused by acme-netready-sidecar-scope-x", err)
		}
		if _, err := sidecar.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, label, metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "acme-netready-sidecar-node-scope-x") {
			t.Errorf("a label on its own Node = %v, want refused by acme-netready-sidecar-node-scope-x", err)
		}
		ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "e-", Namespace: "default"}, EventTime: metav1.NowMicro(),
			ReportingController: "netready-sidecar", ReportingInstance: "netready-sidecar-node-a", Action: "Test", Reason: "Hijack", Type: corev1.EventTypeNormal,
			Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: mine.Name}}
		if _, err := sidecar.EventsV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "acme-netready-sidecar-events-x") {
			t.Errorf("an Event with another reason = %v, want refused by acme-netready-sidecar-events-x", err)
		}
	})

	t.Run("the renamed gate is injected", func(t *testing.T) {
		for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
			p, err := a.Admin.CoreV1().Pods("gated").Create(ctx, kube.PlainPod("gated", "probe", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil && slices.ContainsFunc(p.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return g.ConditionType == publish.DefaultConditionType }) {
				return
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("no readiness gate from acme-netready-readiness-gate-x 30 s after apply (%v)", err)
			}
		}
	})

	kubeconfig := a.Kubeconfig("acme-sidecar", token)
	stateDir := t.TempDir()
	scoped := []string{"--require-scope", "--pod-namespace", ns, "--pod-name", self.Name, "--cni-conf-dir", ""}
	t.Run("the sidecar starts once its probes are refused", func(t *testing.T) {
		listen, logs, stop := kube.RunSidecar(t, kubeconfig, stateDir, "node-a", scoped...)
		defer stop()
		if why := kube.SidecarReadyz(listen, 30*time.Second, http.StatusOK); why != "" {
			t.Fatalf("the scoped sidecar never turned ready: %s\n%s", why, logs.String())
		}
	})

	t.Run("without --pod-name the sidecar finds its pod from its token", func(t *testing.T) {
		// A DaemonSet from before POD_NAME and POD_NAMESPACE, running
		// this image: SelfSubjectReview names the pod the token is bound to.
		listen, logs, stop := kube.RunSidecar(t, kubeconfig, t.TempDir(), "node-a", "--require-scope", "--pod-namespace", "", "--pod-name", "", "--cni-conf-dir", "")
		defer stop()
		if why := kube.SidecarReadyz(listen, 30*time.Second, http.StatusOK); why != "" {
			t.Fatalf("the sidecar without its pod's name never turned ready: %s\n%s", why, logs.String())
		}
		if !strings.Contains(logs.String(), "pod="+ns+"/"+self.Name) {
			t.Errorf("the sidecar did not log the pod it found (%s/%s):\n%s", ns, self.Name, logs.String())
		}
		// A token bound to no pod: it says so, and writes nothing.
		listen, _, stop2 := kube.RunSidecar(t, a.AgentKubeconfig, t.TempDir(), "node-a", "--require-scope", "--pod-namespace", "", "--pod-name", "", "--cni-conf-dir", "")
		defer stop2()
		if why := kube.SidecarReadyz(listen, 3*time.Second, http.StatusOK); !strings.Contains(why, "no pod-bound token") || !strings.Contains(why, "--pod-name") {
			t.Errorf("/readyz with a token bound to no pod = %q, want it to say so and name --pod-name", why)
		}
	})

	t.Run("without its identity the sidecar writes nothing and names the policies", func(t *testing.T) {
		// The policies pick the sidecar out by the permission this
		// binding grants: without it they match nothing, RBAC alone.
		if err := a.Admin.RbacV1().ClusterRoleBindings().Delete(ctx, "acme-netready-sidecar-identity-x", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for start := time.Now(); patch(mine, label) != nil; time.Sleep(200 * time.Millisecond) {
			if time.Since(start) > 30*time.Second {
				t.Fatal("the scope policy still refuses 30 s after the identity binding was deleted")
			}
		}
		listen, logs, stop := kube.RunSidecar(t, kubeconfig, stateDir, "node-a", scoped...)
		defer stop()
		why := kube.SidecarReadyz(listen, 5*time.Second, http.StatusOK)
		for _, want := range []string{"not in force", "(policy netready-sidecar-scope)", "(policy netready-sidecar-node-scope)", "(policy netready-sidecar-events)"} {
			if !strings.Contains(why, want) {
				t.Errorf("/readyz without its identity = %q, want it to name %q", why, want)
			}
		}
		if !strings.Contains(logs.String(), "not writing anything until the sidecar's scope is enforced") {
			t.Errorf("the sidecar's log does not say it holds its writes:\n%s", logs.String())
		}
		// Put it back: the waiting sidecar starts by itself.
		a.Kubectl(t, "apply", "-k", overlay, "--server-side")
		if why := kube.SidecarReadyz(listen, 90*time.Second, http.StatusOK); why != "" {
			t.Fatalf("the sidecar did not start once its identity was back: %s\n%s", why, logs.String())
		}
	})
}
