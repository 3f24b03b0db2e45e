//go:build integration

package deploy

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/test/harness/kube"
)

// testCrossNodeComponents: each cross-node component, with its preset's,
// builds, and its entry, {"crossNode": {}} in 55-cross-node.json, passes
// the installer's --validate. OVN's mounts the NB and SB sockets'
// folder; Cilium's mounts nothing (the sidecar reads the pod's
// CiliumEndpoint from the API server), and components/cilium grants that
// read alone: get on ciliumendpoints.
func testCrossNodeComponents(t *testing.T) {
	for _, tc := range []struct {
		components []string
		ovnMount   bool
	}{
		{[]string{"ovn-kubernetes", "cross-node"}, true},
		{[]string{"cilium", "cross-node-cilium"}, false},
	} {
		t.Run(strings.Join(tc.components, "+"), func(t *testing.T) {
			objs := kube.KustomizeWith(t, tc.components...)
			cm := validatedEntry(t, objs)
			if got := cm.Data["55-cross-node.json"]; got != "{\"crossNode\": {}}\n" {
				t.Errorf("entry %s's 55-cross-node.json = %q, want {\"crossNode\": {}}", cm.Name, got)
			}
			mounted := slices.ContainsFunc(container(daemonSet(t, objs), "sidecar").VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.MountPath == "/var/run/ovn" && m.ReadOnly
			})
			if mounted != tc.ovnMount {
				t.Errorf("the sidecar mounts /var/run/ovn read-only: %v, want %v", mounted, tc.ovnMount)
			}
		})
	}
	t.Run("cilium's RBAC", func(t *testing.T) {
		want := []rbacv1.PolicyRule{{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumendpoints"}, Verbs: []string{"get"}}}
		if diff := cmp.Diff(want, boundRole(t, kube.KustomizeWith(t, "cilium"), "netready-sidecar-cilium")); diff != "" {
			t.Errorf("components/cilium's ClusterRole netready-sidecar-cilium (-want +got):\n%s", diff)
		}
		if got := boundRole(t, kube.KustomizeWith(t, "ovn-kubernetes", "cross-node"), "netready-sidecar-cilium"); got != nil {
			t.Errorf("without components/cilium, netready-sidecar-cilium grants %v", got)
		}
	})
}

// boundRole is the rules of the ClusterRole name in objs, once its
// binding of the same name is checked to name the sidecar's
// ServiceAccount; nil when objs hold neither.
func boundRole(t *testing.T, objs map[string][]string, name string) []rbacv1.PolicyRule {
	t.Helper()
	var rules []rbacv1.PolicyRule
	for _, doc := range objs["ClusterRole"] {
		var r rbacv1.ClusterRole
		if yaml.Unmarshal([]byte(doc), &r) == nil && r.Name == name {
			rules = r.Rules
		}
	}
	bound := false
	for _, doc := range objs["ClusterRoleBinding"] {
		var b rbacv1.ClusterRoleBinding
		if yaml.Unmarshal([]byte(doc), &b) != nil || b.Name != name {
			continue
		}
		bound = true
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "netready-sidecar", Namespace: "kube-system"}}
		if diff := cmp.Diff(want, b.Subjects); diff != "" || b.RoleRef.Name != name {
			t.Errorf("%s's binding: role %s, subjects (-want +got):\n%s", name, b.RoleRef.Name, diff)
		}
	}
	if bound != (rules != nil) {
		t.Errorf("%s: rules %v, bound %v; want both or neither", name, rules, bound)
	}
	return rules
}
