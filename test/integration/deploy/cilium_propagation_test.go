//go:build integration

package deploy

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/test/harness/kube"
)

// measureFlag is what components/cilium-propagation gives the sidecar.
const measureFlag = "--measure-cilium-propagation=netready.io/measure-cilium-propagation=true"

// testCiliumPropagationComponent: components/cilium-propagation, with
// components/cilium, adds the sidecar's measure flag (in args, so that it
// survives components/uninstall's whole commands) and the ClusterRole
// netready-sidecar-cilium-propagation, list and watch on ciliumendpoints,
// and nothing else: every other object is components/cilium's, and no
// rule of any role lets the sidecar write a CiliumEndpoint. The sidecar
// keeps the agent's socket folder, through which it asks its agent.
func testCiliumPropagationComponent(t *testing.T) {
	base, objs := kube.KustomizeWith(t, "cilium"), kube.KustomizeWith(t, "cilium", "cilium-propagation")
	ds, baseDS := daemonSet(t, objs), daemonSet(t, base)
	sidecar := container(ds, "sidecar")
	if diff := cmp.Diff([]string{measureFlag}, sidecar.Args); diff != "" {
		t.Errorf("the sidecar's args (-want +got):\n%s", diff)
	}
	if !slices.ContainsFunc(sidecar.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/var/run/cilium" && m.ReadOnly }) {
		t.Errorf("the measuring sidecar has no read-only mount of /var/run/cilium: %v", sidecar.VolumeMounts)
	}
	// The DaemonSet is components/cilium's but for the args.
	for i := range ds.Spec.Template.Spec.Containers {
		ds.Spec.Template.Spec.Containers[i].Args = nil
	}
	if diff := cmp.Diff(baseDS, ds); diff != "" {
		t.Errorf("components/cilium-propagation changes the DaemonSet beyond the sidecar's args (-cilium +with it):\n%s", diff)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumendpoints"}, Verbs: []string{"list", "watch"}}}
	if diff := cmp.Diff(want, boundRole(t, objs, "netready-sidecar-cilium-propagation")); diff != "" {
		t.Errorf("netready-sidecar-cilium-propagation (-want +got):\n%s", diff)
	}
	if got := boundRole(t, base, "netready-sidecar-cilium-propagation"); got != nil {
		t.Errorf("components/cilium alone grants %v", got)
	}
	for kind, docs := range objs {
		extra := map[string]int{"ClusterRole": 1, "ClusterRoleBinding": 1}[kind]
		if kind != "DaemonSet" && (len(docs) != len(base[kind])+extra || !containsAll(docs, base[kind])) {
			t.Errorf("%s: %d objects, want components/cilium's %d and %d more", kind, len(docs), len(base[kind]), extra)
		}
	}
	checkCEPReadOnly(t, objs)

	t.Run("with cross-node-cilium", func(t *testing.T) {
		objs := kube.KustomizeWith(t, "cilium", "cross-node-cilium", "cilium-propagation")
		validatedEntry(t, objs)
		if args := container(daemonSet(t, objs), "sidecar").Args; !slices.Equal(args, []string{measureFlag}) {
			t.Errorf("the sidecar's args = %v, want [%s]", args, measureFlag)
		}
	})
	t.Run("with uninstall", func(t *testing.T) {
		sidecar := container(daemonSet(t, kube.KustomizeWith(t, "cilium", "cilium-propagation", "uninstall")), "sidecar")
		if !slices.Contains(sidecar.Command, "--uninstall") || !slices.Equal(sidecar.Args, []string{measureFlag}) {
			t.Errorf("uninstalling, the sidecar runs %v %v; want --uninstall, and the measure flag kept", sidecar.Command, sidecar.Args)
		}
	})
}

// containsAll reports whether every doc of want is in docs.
func containsAll(docs, want []string) bool {
	for _, w := range want {
		if !slices.Contains(docs, w) {
			return false
		}
	}
	return true
}

// checkCEPReadOnly fails when any ClusterRole in objs grants more than
// get, list and watch on ciliumendpoints (or on everything of cilium.io).
func checkCEPReadOnly(t *testing.T, objs map[string][]string) {
	t.Helper()
	for _, doc := range objs["ClusterRole"] {
		var r rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
			t.Fatalf("ClusterRole: %v\n%s", err, doc)
		}
		for _, rule := range r.Rules {
			if !slices.Contains(rule.APIGroups, "cilium.io") && !slices.Contains(rule.APIGroups, "*") {
				continue
			}
			for _, v := range rule.Verbs {
				if !slices.Contains([]string{"get", "list", "watch"}, v) {
					t.Errorf("ClusterRole %s grants %q on %v of cilium.io: the sidecar must only read CiliumEndpoints", r.Name, v, rule.Resources)
				}
			}
		}
	}
}
