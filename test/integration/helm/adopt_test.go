//go:build integration

package helm

import (
	"strings"
	"testing"

	"github.com/netready/netready/test/harness/kube"
)

// TestHelmAdoptsAKustomizeInstallWithoutReinstalling: an install made
// with `kubectl apply -k deploy/`, labelled and annotated as
// docs/components.md says, is taken over by `helm install` with no
// object deleted or re-created: the DaemonSet keeps its UID and the
// entry ConfigMap its name, and each object is Helm's afterwards.
func TestHelmAdoptsAKustomizeInstallWithoutReinstalling(t *testing.T) {
	a := kube.StartAPIServer(t)
	kc := a.Kubeconfig("admin", kube.AdminToken)
	a.Kubectl(t, "apply", "-k", "../../../deploy")
	uid := a.Kubectl(t, "get", "daemonset", "netready", "-n", "kube-system", "-o", "jsonpath={.metadata.uid}")
	entry := a.Kubectl(t, "get", "daemonset", "netready", "-n", "kube-system", "-o", `jsonpath={.spec.template.spec.volumes[?(@.name=="entry")].configMap.name}`)

	// docs/components.md's adoption commands, on deploy/ itself.
	a.Kubectl(t, "label", "-k", "../../../deploy", "app.kubernetes.io/managed-by=Helm", "--overwrite")
	a.Kubectl(t, "annotate", "-k", "../../../deploy", "meta.helm.sh/release-name=netready", "meta.helm.sh/release-namespace=kube-system", "--overwrite")
	kube.MustHelm(t, kc, "install", "netready", chartDir, "--namespace", "kube-system")

	if got := a.Kubectl(t, "get", "daemonset", "netready", "-n", "kube-system", "-o", "jsonpath={.metadata.uid}"); got != uid {
		t.Errorf("the DaemonSet's UID %s -> %s: helm re-created it", uid, got)
	}
	if got := a.Kubectl(t, "get", "daemonset", "netready", "-n", "kube-system", "-o", `jsonpath={.spec.template.spec.volumes[?(@.name=="entry")].configMap.name}`); got != entry {
		t.Errorf("the DaemonSet's entry %s -> %s: the pods would roll", entry, got)
	}
	for _, name := range strings.Fields(a.Kubectl(t, "get", "-k", "../../../deploy", "-o", "name")) {
		chart := a.Kubectl(t, "get", name, "-n", "kube-system", "-o", `jsonpath={.metadata.labels.helm\.sh/chart}`)
		if !strings.HasPrefix(chart, "netready-") {
			t.Errorf("%s after helm install: helm.sh/chart=%q, want the chart's label", name, chart)
		}
	}
	if out := kube.MustHelm(t, kc, "list", "--namespace", "kube-system"); !strings.Contains(out, "deployed") {
		t.Errorf("helm list:\n%s", out)
	}
}
