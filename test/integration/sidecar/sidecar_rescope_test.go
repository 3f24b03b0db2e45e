//go:build integration

package sidecar

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness/kube"
)

// TestSidecarHoldsItsWritesWhileItsScopeIsLifted runs the real sidecar
// binary, scoped (--require-scope, with its default flags: the clock's
// re-check is 30 minutes away, so only its watch can catch a change), on
// a real kube-apiserver with deploy/ applied, then lifts its scope while
// it runs: first by deleting netready-sidecar-scope's binding, then the
// identity binding the policies know the sidecar by. Each time the
// sidecar must stop writing within a few seconds (a new gated pod of its
// node gets no condition, though the API server would now let it write
// one), with /readyz naming the policies, and start again by itself once
// deploy/ is applied again.
func TestSidecarHoldsItsWritesWhileItsScopeIsLifted(t *testing.T) {
	d := kube.NewScopedDeploy(t)
	a, ctx := d.A, context.Background()
	kubeconfig := a.Kubeconfig("bound", a.BoundToken(t, d.Self))
	listen, logs, _ := kube.RunSidecar(t, kubeconfig, t.TempDir(), "node-a",
		"--require-scope", "--pod-namespace", d.Self.Namespace, "--pod-name", d.Self.Name, "--cni-conf-dir", "")
	if why := kube.SidecarReadyz(listen, 30*time.Second, http.StatusOK); why != "" {
		t.Fatalf("the scoped sidecar never turned ready: %s\n%s", why, logs.String())
	}
	gatedPod := func(name string) *corev1.Pod {
		p := kube.PlainPod("default", name, "node-a")
		p.Spec.HostNetwork = true // True at once, with no marker
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: publish.DefaultConditionType}}
		return a.Create(t, p)
	}
	gatedPod("before")
	kube.WaitCondition(t, a, "before", 15*time.Second, "True while scoped", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })

	for _, tc := range []struct {
		name string
		lift func(t *testing.T)
	}{
		{"netready-sidecar-scope's binding deleted", func(t *testing.T) {
			if err := a.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, "netready-sidecar-scope", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{"the identity binding deleted", func(t *testing.T) {
			if err := a.Admin.RbacV1().ClusterRoleBindings().Delete(ctx, "netready-sidecar-identity", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), "'", "")
			tc.lift(t)
			// Held within a bound: the watch's event, settled (2 s) and
			// spread (up to 5 s), then the check.
			if why := kube.SidecarReadyz(listen, 20*time.Second, http.StatusServiceUnavailable); why != "" {
				t.Fatalf("/readyz 20 s after the scope was lifted = %s, want 503\n%s", why, logs.String())
			}
			why := kube.SidecarReadyz(listen, time.Second, http.StatusOK)
			for _, want := range []string{"not in force", "(policy netready-sidecar-scope)"} {
				if !strings.Contains(why, want) {
					t.Errorf("/readyz while held = %q, want it to name %q", why, want)
				}
			}
			gatedPod(pod)
			time.Sleep(3 * time.Second)
			if _, c := a.Condition(pod); c != nil {
				t.Errorf("the sidecar wrote %+v while its scope was lifted", c)
			}
			// Control: the API server would have taken that write now.
			if err := d.PatchStatus(d.Self, types.MergePatchType, []byte(`{"metadata":{"labels":{"netready.io/unscoped":"`+pod+`"}}}`)); err != nil {
				t.Errorf("the sidecar's identity relabelling its pod with the scope lifted = %v: the hold proves nothing", err)
			}

			a.Kubectl(t, "apply", "-k", "../../../deploy", "--server-side")
			if why := kube.SidecarReadyz(listen, 45*time.Second, http.StatusOK); why != "" {
				t.Fatalf("the sidecar did not resume once deploy/ was applied again: %s\n%s", why, logs.String())
			}
			kube.WaitCondition(t, a, pod, 20*time.Second, "True once the scope is back", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
		})
	}
	if !strings.Contains(logs.String(), "holding every write") || !strings.Contains(logs.String(), "in force again") {
		t.Errorf("the sidecar's log does not say it held its writes and resumed:\n%s", logs.String())
	}
}
