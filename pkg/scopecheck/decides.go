package scopecheck

import (
	"reflect"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What decides the scope, as the watch (watch.go) keeps it: of each
// object, only the part that can change a probe's answer. The rest (its
// labels, its status, a rule about other resources) is dropped, so that
// a change to it compares equal and sends no probe, and the cache stays
// small. What is kept errs on the side of a probe too many.

// probeRequest is a request of the probes (probes.go) as an admission
// rule matches it.
type probeRequest struct {
	group, resource, subresource string
	operation                    admissionv1.OperationType
}

var probeRequests = []probeRequest{
	{"", "pods", "status", "UPDATE"},
	{"", "nodes", "", "UPDATE"},
	{"", "nodes", "status", "UPDATE"},
	{"events.k8s.io", "events", "", "CREATE"},
	// A rule on core/v1 Events matches events.k8s.io ones too, under
	// matchPolicy Equivalent (the default).
	{"", "events", "", "CREATE"},
}

// ruleMatches says whether r matches q, as the API server matches
// admission rules (versions, scope and resource names aside: they can
// only narrow it).
func ruleMatches(r admissionv1.RuleWithOperations, q probeRequest) bool {
	if !slices.Contains(r.Operations, admissionv1.OperationAll) && !slices.Contains(r.Operations, q.operation) {
		return false
	}
	if !slices.Contains(r.APIGroups, "*") && !slices.Contains(r.APIGroups, q.group) {
		return false
	}
	for _, res := range r.Resources {
		name, sub, hasSub := strings.Cut(res, "/")
		switch {
		case res == "*/*":
			return true
		case !hasSub:
			if q.subresource == "" && (name == "*" || name == q.resource) {
				return true
			}
		case q.subresource != "" && (name == "*" || name == q.resource) && (sub == "*" || sub == q.subresource):
			return true
		}
	}
	return false
}

// policyDecides says whether a policy with spec can answer a probe: it
// matches one of the probes' requests (or matches without constraints).
func policyDecides(spec *admissionv1.ValidatingAdmissionPolicySpec) bool {
	if spec.MatchConstraints == nil {
		return true
	}
	for _, r := range spec.MatchConstraints.ResourceRules {
		for _, q := range probeRequests {
			if ruleMatches(r.RuleWithOperations, q) {
				return true
			}
		}
	}
	return false
}

// slimMeta keeps what identifies an object in the informer's store.
func slimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion}
}

// reducePolicy keeps a policy's spec when it can answer a probe.
func reducePolicy(p *admissionv1.ValidatingAdmissionPolicy) *admissionv1.ValidatingAdmissionPolicy {
	out := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: slimMeta(p.ObjectMeta)}
	if policyDecides(&p.Spec) {
		out.Spec = *p.Spec.DeepCopy()
	}
	return out
}

// reduceBinding keeps a binding's spec: whether it decides anything is
// its policy's to say, when the binding changes (Watch.decides).
func reduceBinding(b *admissionv1.ValidatingAdmissionPolicyBinding) *admissionv1.ValidatingAdmissionPolicyBinding {
	return &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: slimMeta(b.ObjectMeta), Spec: *b.Spec.DeepCopy()}
}

// identityGroup is the API group of the permission the policies know the
// sidecar by (sidecar-identity.netready.io, and its decoy).
const identityGroup = "netready.io"

// reduceRole keeps the rules that can grant a permission in the identity's
// group: a change to them can turn the policies' identity check.
func reduceRole(r *rbacv1.ClusterRole) *rbacv1.ClusterRole {
	out := &rbacv1.ClusterRole{ObjectMeta: slimMeta(r.ObjectMeta)}
	for _, rule := range r.Rules {
		if slices.Contains(rule.APIGroups, identityGroup) || slices.Contains(rule.APIGroups, rbacv1.APIGroupAll) {
			out.Rules = append(out.Rules, *rule.DeepCopy())
		}
	}
	return out
}

// reduceRoleBinding keeps the subjects that can be the sidecar, and then
// the role they are bound to.
func reduceRoleBinding(self Self, b *rbacv1.ClusterRoleBinding) *rbacv1.ClusterRoleBinding {
	out := &rbacv1.ClusterRoleBinding{ObjectMeta: slimMeta(b.ObjectMeta)}
	for _, s := range b.Subjects {
		if isSelf(self, s) {
			out.Subjects = append(out.Subjects, s)
		}
	}
	if len(out.Subjects) > 0 {
		out.RoleRef = b.RoleRef
	}
	return out
}

// isSelf says whether s can name the sidecar: its ServiceAccount, its
// user or one of its groups (system:serviceaccounts, say).
func isSelf(self Self, s rbacv1.Subject) bool {
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		return serviceAccountPrefix+s.Namespace+":"+s.Name == self.User
	case rbacv1.UserKind:
		return s.Name == self.User
	case rbacv1.GroupKind:
		return slices.Contains(self.Groups, s.Name)
	}
	return false
}

const serviceAccountPrefix = "system:serviceaccount:"

// part is what a reduced object keeps that decides the scope (nil for
// another type), to compare an update's old and new objects.
func part(obj any) any {
	switch o := obj.(type) {
	case *admissionv1.ValidatingAdmissionPolicy:
		return o.Spec
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		return o.Spec
	case *rbacv1.ClusterRole:
		return o.Rules
	case *rbacv1.ClusterRoleBinding:
		return struct {
			Ref      rbacv1.RoleRef
			Subjects []rbacv1.Subject
		}{o.RoleRef, o.Subjects}
	}
	return nil
}

// decides says whether a reduced policy, role or role binding kept
// anything; a binding's policy decides for it (policy: the reduced
// policy of that name, nil when there is none).
func decides(obj any, policy func(name string) *admissionv1.ValidatingAdmissionPolicy) bool {
	switch o := obj.(type) {
	case *admissionv1.ValidatingAdmissionPolicy:
		return !reflect.ValueOf(o.Spec).IsZero()
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		// A binding of no policy does nothing until the policy comes,
		// and the policy's own event says so then.
		p := policy(o.Spec.PolicyName)
		return p != nil && decides(p, policy)
	case *rbacv1.ClusterRole:
		return len(o.Rules) > 0
	case *rbacv1.ClusterRoleBinding:
		return len(o.Subjects) > 0
	}
	return false
}
