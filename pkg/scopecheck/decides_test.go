package scopecheck

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestProbeRequestsAreTheProbes: the requests a policy must match to
// decide the scope are those the probes send.
func TestProbeRequestsAreTheProbes(t *testing.T) {
	ops := map[string]admissionv1.OperationType{"patch": admissionv1.Update, "create": admissionv1.Create}
	for _, pol := range policies(&answers{}, me) {
		for _, p := range pol.probes {
			resource, sub, _ := strings.Cut(p.resource, "/")
			q := probeRequest{p.group, resource, sub, ops[p.verb]}
			if !slices.Contains(probeRequests, q) {
				t.Errorf("probe %q sends %+v, which probeRequests lacks", p.what, q)
			}
		}
	}
}

func rules(ops []admissionv1.OperationType, groups, resources []string) *admissionv1.MatchResources {
	return &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: ops, Rule: admissionv1.Rule{APIGroups: groups, APIVersions: []string{"*"}, Resources: resources}}}}}
}

// TestPolicyDecides: a policy decides the scope when its rules match one
// of the probes' requests, as the API server matches them.
func TestPolicyDecides(t *testing.T) {
	update, create, del := []admissionv1.OperationType{admissionv1.Update}, []admissionv1.OperationType{admissionv1.Create}, []admissionv1.OperationType{admissionv1.Delete}
	all := []admissionv1.OperationType{admissionv1.OperationAll}
	core, events := []string{""}, []string{"events.k8s.io"}
	tests := []struct {
		name  string
		match *admissionv1.MatchResources
		want  bool
	}{
		{"netready's pod policy", rules(update, core, []string{"pods/status"}), true},
		{"netready's node policy", rules(update, core, []string{"nodes", "nodes/status"}), true},
		{"netready's Event policy", rules([]admissionv1.OperationType{admissionv1.Create, admissionv1.Update}, events, []string{"events"}), true},
		{"core/v1 Events: equivalent", rules(create, core, []string{"events"}), true},
		{"everything", rules(all, []string{"*"}, []string{"*/*"}), true},
		{"every subresource of pods", rules(update, core, []string{"pods/*"}), true},
		{"every status", rules(update, core, []string{"*/status"}), true},
		{"every core resource: Nodes", rules(update, core, []string{"*"}), true},
		{"no constraints", nil, true},
		{"pods, not their status", rules(update, core, []string{"pods"}), false},
		{"pods' other subresources", rules(update, core, []string{"pods/ephemeralcontainers"}), false},
		{"Deployments", rules(all, []string{"apps"}, []string{"deployments"}), false},
		{"deleting Events", rules(del, events, []string{"events"}), false},
		{"creating Nodes", rules(create, core, []string{"nodes"}), false},
		{"ConfigMaps of every operation", rules(all, core, []string{"configmaps"}), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := policyDecides(&admissionv1.ValidatingAdmissionPolicySpec{MatchConstraints: tc.match}); got != tc.want {
				t.Errorf("policyDecides = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestReduce: of each object only what decides the scope is kept, so
// that a change elsewhere compares equal; a binding decides when its
// policy does.
func TestReduce(t *testing.T) {
	self := Self{User: "system:serviceaccount:kube-system:netready-sidecar",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	om := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, ResourceVersion: "7", Labels: map[string]string{"helm.sh/chart": "netready-0.6.0"}}
	}
	sa := func(ns, name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
	}
	group := func(name string) rbacv1.Subject { return rbacv1.Subject{Kind: rbacv1.GroupKind, Name: name} }
	user := func(name string) rbacv1.Subject { return rbacv1.Subject{Kind: rbacv1.UserKind, Name: name} }
	identity := rbacv1.PolicyRule{APIGroups: []string{"netready.io"}, Resources: []string{"sidecar-identity"}, Verbs: []string{"use"}}
	wildcard := rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}
	pods := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "netready-sidecar-identity"}
	scoping := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: om("acme-netready-sidecar-scope"),
		Spec: admissionv1.ValidatingAdmissionPolicySpec{MatchConstraints: rules([]admissionv1.OperationType{admissionv1.Update}, []string{""}, []string{"pods/status"})}}
	other := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: om("replicas-limit"),
		Spec: admissionv1.ValidatingAdmissionPolicySpec{MatchConstraints: rules([]admissionv1.OperationType{admissionv1.Create}, []string{"apps"}, []string{"deployments"})}}
	reducedPolicies := map[string]*admissionv1.ValidatingAdmissionPolicy{scoping.Name: reducePolicy(scoping), other.Name: reducePolicy(other)}
	policy := func(name string) *admissionv1.ValidatingAdmissionPolicy { return reducedPolicies[name] }
	binding := func(policy string) *admissionv1.ValidatingAdmissionPolicyBinding {
		return &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: om(policy),
			Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}
	}
	crb := func(subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{ObjectMeta: om("b"), RoleRef: ref, Subjects: subjects}
	}
	type got struct {
		Part    any
		Decides bool
	}
	tests := []struct {
		name string
		obj  any
		want got
	}{
		{"a policy matching the probes: its spec", reducePolicy(scoping), got{scoping.Spec, true}},
		{"a policy on Deployments: nothing", reducePolicy(other), got{admissionv1.ValidatingAdmissionPolicySpec{}, false}},
		{"the binding of a policy that decides", reduceBinding(binding(scoping.Name)), got{binding(scoping.Name).Spec, true}},
		{"the binding of one that does not", reduceBinding(binding(other.Name)), got{binding(other.Name).Spec, false}},
		{"the binding of no policy", reduceBinding(binding("gone")), got{binding("gone").Spec, false}},
		{"a role: its rules in netready.io or every group", reduceRole(&rbacv1.ClusterRole{ObjectMeta: om("r"), Rules: []rbacv1.PolicyRule{pods, identity, wildcard}}),
			got{[]rbacv1.PolicyRule{identity, wildcard}, true}},
		{"a role about pods: nothing", reduceRole(&rbacv1.ClusterRole{ObjectMeta: om("r"), Rules: []rbacv1.PolicyRule{pods}}), got{[]rbacv1.PolicyRule(nil), false}},
		{"a binding: the subjects that can be the sidecar, and its role",
			reduceRoleBinding(self, crb(sa("kube-system", "other"), sa("kube-system", "netready-sidecar"), group("system:serviceaccounts"), group("system:masters"), user("alice"))),
			got{struct {
				Ref      rbacv1.RoleRef
				Subjects []rbacv1.Subject
			}{ref, []rbacv1.Subject{sa("kube-system", "netready-sidecar"), group("system:serviceaccounts")}}, true}},
		{"a binding to its user name", reduceRoleBinding(self, crb(user(self.User))),
			got{struct {
				Ref      rbacv1.RoleRef
				Subjects []rbacv1.Subject
			}{ref, []rbacv1.Subject{user(self.User)}}, true}},
		{"a binding of others: nothing", reduceRoleBinding(self, crb(sa("shop", "netready-sidecar"), group("system:masters"))),
			got{struct {
				Ref      rbacv1.RoleRef
				Subjects []rbacv1.Subject
			}{}, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, got{part(tc.obj), decides(tc.obj, policy)}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// Reduced twice is reduced once (client-go may transform again).
	b := crb(sa("kube-system", "netready-sidecar"), user("alice"))
	if diff := cmp.Diff(reduceRoleBinding(self, b), reduceRoleBinding(self, reduceRoleBinding(self, b))); diff != "" {
		t.Errorf("reduced twice (-once +twice):\n%s", diff)
	}
}
