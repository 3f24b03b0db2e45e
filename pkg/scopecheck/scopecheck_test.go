package scopecheck

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

const sidecarUser = "system:serviceaccount:kube-system:netready-sidecar"

var me = Self{Node: "n", PodNamespace: "kube-system", PodName: "me", User: sidecarUser}

// The probes by kind: what each writes, so that a fake API can answer it.
const (
	podLabel, podAnnotation, podCondition    = "pods/status label", "pods/status annotation", "pods/status condition"
	nodeLabel, nodeAnnotation, nodeCondition = "nodes label", "nodes annotation", "nodes/status condition"
	evReason, evController, evNode           = "events reason", "events controller", "events node"
)

var allKinds = []string{podLabel, podAnnotation, podCondition, nodeLabel, nodeAnnotation, nodeCondition, evReason, evController, evNode}

// answers gives each probe kind its answer (nil: let through), and
// records the kinds asked, in order.
type answers struct {
	mu    sync.Mutex
	by    map[string]error
	asked []string
}

func (a *answers) answer(kind string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, kind)
	return a.by[kind]
}

func patchKind(prefix string, data []byte) string {
	switch s := string(data); {
	case strings.Contains(s, `"labels"`):
		return prefix + " label"
	case strings.Contains(s, `"annotations"`):
		return prefix + " annotation"
	default:
		return prefix + " condition"
	}
}

func (a *answers) PatchPodStatus(_ context.Context, _, _ string, _ types.PatchType, data []byte) error {
	return a.answer(patchKind("pods/status", data))
}

func (a *answers) PatchNode(_ context.Context, _ string, _ types.PatchType, data []byte, sub ...string) (*corev1.Node, error) {
	prefix := "nodes"
	if len(sub) > 0 {
		prefix = "nodes/" + sub[0]
	}
	return &corev1.Node{}, a.answer(patchKind(prefix, data))
}

func (a *answers) CreateEvent(_ context.Context, ev *eventsv1.Event) error {
	switch {
	case ev.Regarding.Kind == "Node":
		return a.answer(evNode)
	case ev.ReportingController != "netready-sidecar":
		return a.answer(evController)
	default:
		return a.answer(evReason)
	}
}

// request is how kube-apiserver names each kind's request in a refusal:
// resource, the name RBAC gives, the name admission gives, namespace.
func request(kind string) (gr schema.GroupResource, resource, rbacName, admissionName, namespace string) {
	switch res, _, _ := strings.Cut(kind, " "); res {
	case "pods/status":
		return schema.GroupResource{Resource: "pods"}, res, "me", "me", "kube-system"
	case "nodes", "nodes/status":
		return schema.GroupResource{Resource: "nodes"}, res, "n", "n", ""
	default:
		ns := "kube-system"
		if kind == evNode {
			ns = "default"
		}
		// kube-apiserver 1.36 names the object by the name it generated.
		return schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "events", "", "netready-scope-check-x7k2p", ns
	}
}

// byPolicy is a ValidatingAdmissionPolicy's refusal of kind, as
// kube-apiserver words it, with reason Forbidden.
func byPolicy(kind, policy, msg string) error {
	gr, _, _, name, _ := request(kind)
	return apierrors.NewForbidden(gr, name, fmt.Errorf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", policy, policy, msg))
}

// byRBAC is RBAC's refusal of kind for user, as kube-apiserver words it.
func byRBAC(kind, user string) error {
	gr, resource, name, _, ns := request(kind)
	verb := "patch"
	if gr.Resource == "events" {
		verb = "create"
	}
	scope := "at the cluster scope"
	if ns != "" {
		scope = fmt.Sprintf("in the namespace %q", ns)
	}
	return apierrors.NewForbidden(gr, name, fmt.Errorf("User %q cannot %s resource %q in API group %q %s", user, verb, resource, gr.Group, scope))
}

// netready's own policy for each kind.
func ownPolicy(kind string) string {
	switch {
	case strings.HasPrefix(kind, "pods"):
		return "netready-sidecar-scope"
	case strings.HasPrefix(kind, "nodes"):
		return "netready-sidecar-node-scope"
	}
	return "netready-sidecar-events"
}

// inForce refuses every kind by netready's policy, then applies edits.
func inForce(edits map[string]error) map[string]error {
	by := map[string]error{}
	for _, k := range allKinds {
		by[k] = byPolicy(k, ownPolicy(k), "netready-sidecar may not change labels")
	}
	for k, err := range edits {
		by[k] = err
	}
	return by
}

// TestCheck: a refusal counts for a policy only when that policy (with a
// prefix or suffix) or RBAC, in its exact words for the sidecar's user,
// made it; a refusal by another check moves on to the policy's next
// probe; a probe let through is unscoped; a policy whose every probe
// another check refused is unknown, naming that check; any other error
// is neither.
func TestCheck(t *testing.T) {
	kyverno := byPolicy(podLabel, "kyverno-labels", "labels cannot be changed")
	freeze := func(k string) error {
		return byPolicy(k, "acme-kube-system-frozen", "pods in kube-system cannot be changed")
	}
	webhook := func(msg string) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
			Message: `admission webhook "validate.kyverno.svc" denied the request: ` + msg}}
	}
	invalid := byPolicy(podLabel, "acme-labels", "labels cannot be changed").(*apierrors.StatusError)
	invalid.ErrStatus.Code, invalid.ErrStatus.Reason = http.StatusUnprocessableEntity, metav1.StatusReasonInvalid
	for _, tc := range []struct {
		name string
		by   map[string]error
		// want is "" for nil, else substrings of the error.
		want              []string
		unscoped, unknown bool
		// asked, when set, are the probes sent, in order.
		asked []string
	}{
		{name: "every policy refuses its first probe", by: inForce(nil), asked: []string{podLabel, nodeLabel, evReason}},
		{name: "a prefix and a suffix on the policy's name", by: inForce(map[string]error{podLabel: byPolicy(podLabel, "acme-netready-sidecar-scope-x", "no")})},
		{name: "an older API server names an Event by its generateName", by: inForce(map[string]error{evReason: apierrors.NewForbidden(schema.GroupResource{Group: "events.k8s.io", Resource: "events"},
			"netready-scope-check-", errors.New("ValidatingAdmissionPolicy 'netready-sidecar-events' with binding 'netready-sidecar-events' denied request: no"))}),
			asked: []string{podLabel, nodeLabel, evReason}},
		{name: "nothing refused", by: map[string]error{}, unscoped: true,
			want: []string{"a label on its own pod through pods/status (policy netready-sidecar-scope), a label on its own Node (policy netready-sidecar-node-scope), an Event with reason NetreadyScopeCheck (policy netready-sidecar-events)",
				"Apply deploy/ (or the Helm chart) whole, on Kubernetes 1.30 or later", "kubectl get validatingadmissionpolicy"}},
		{name: "the events policy missing", by: inForce(map[string]error{evReason: nil}), unscoped: true, want: []string{"an Event with reason NetreadyScopeCheck (policy netready-sidecar-events)"}},
		{name: "the API server unreachable", by: inForce(map[string]error{podLabel: errors.New("connection refused")}),
			want: []string{"dry-run a label on its own pod through pods/status: connection refused"}},
		{name: "own pod not found", by: inForce(map[string]error{podLabel: apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "me")}), want: []string{"not found"}},
		{name: "RBAC refuses every Node write", by: inForce(map[string]error{nodeLabel: byRBAC(nodeLabel, sidecarUser), nodeAnnotation: byRBAC(nodeAnnotation, sidecarUser),
			nodeCondition: byRBAC(nodeCondition, sidecarUser)}), asked: []string{podLabel, nodeLabel, nodeAnnotation, nodeCondition, evReason}},
		{name: "RBAC with the authorizers' reasons after it", by: inForce(map[string]error{evReason: byRBAC(evReason, sidecarUser), evController: byRBAC(evController, sidecarUser),
			evNode: apierrors.NewForbidden(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "",
				fmt.Errorf(`User %q cannot create resource "events" in API group "events.k8s.io" in the namespace "default": RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`, sidecarUser))})},
		// The defect of v0.5: "cannot " in another policy's message was taken for RBAC.
		{name: "a Kyverno-like policy refuses the label while the scope is lifted", by: map[string]error{podLabel: kyverno, nodeLabel: byPolicy(nodeLabel, "netready-sidecar-node-scope", "no"),
			evReason: byPolicy(evReason, "netready-sidecar-events", "no")}, unscoped: true,
			want: []string{"an annotation on its own pod through pods/status (policy netready-sidecar-scope)"}},
		{name: "a Kyverno-like policy refuses the label while the scope holds", by: inForce(map[string]error{podLabel: kyverno}),
			asked: []string{podLabel, podAnnotation, nodeLabel, evReason}},
		{name: "RBAC's words for another user", by: inForce(map[string]error{nodeLabel: byRBAC(nodeLabel, "system:serviceaccount:kube-system:other"),
			nodeAnnotation: byRBAC(nodeAnnotation, "system:serviceaccount:kube-system:other"), nodeCondition: byRBAC(nodeCondition, "system:serviceaccount:kube-system:other")}),
			unknown: true, want: []string{"policy netready-sidecar-node-scope", `User "system:serviceaccount:kube-system:other" cannot patch`}},
		{name: "a webhook quoting RBAC's words", by: inForce(map[string]error{podLabel: webhook(`User "` + sidecarUser + `" cannot patch resource "pods/status"`),
			podAnnotation: webhook("no"), podCondition: webhook("no")}),
			unknown: true, want: []string{`policy netready-sidecar-scope (admission webhook "validate.kyverno.svc" denied the request: User "` + sidecarUser + `" cannot patch resource "pods/status"; admission webhook "validate.kyverno.svc" denied the request: no)`}},
		{name: "another policy refuses every probe of a policy", by: inForce(map[string]error{podLabel: freeze(podLabel), podAnnotation: freeze(podAnnotation), podCondition: freeze(podCondition)}),
			unknown: true, want: []string{"every dry-run probe of policy netready-sidecar-scope (ValidatingAdmissionPolicy 'acme-kube-system-frozen': pods in kube-system cannot be changed) was refused first",
				"Let that check pass dry-run requests of " + sidecarUser}},
		{name: "another policy's refusal with reason Invalid", by: inForce(map[string]error{podLabel: invalid, podAnnotation: freeze(podAnnotation), podCondition: freeze(podCondition)}),
			unknown: true, want: []string{"ValidatingAdmissionPolicy 'acme-labels'"}},
		{name: "a webhook without dry run", by: inForce(map[string]error{nodeLabel: apierrors.NewBadRequest(`admission webhook "audit.example.com" does not support dry run`),
			nodeAnnotation: apierrors.NewBadRequest(`admission webhook "audit.example.com" does not support dry run`), nodeCondition: byRBAC(nodeCondition, sidecarUser)}),
			unknown: true, want: []string{`policy netready-sidecar-node-scope (admission webhook "audit.example.com" does not support dry run) was refused first`}},
		{name: "another netready policy", by: inForce(map[string]error{podLabel: byPolicy(podLabel, "netready-sidecar-node-scope", "no"),
			podAnnotation: byPolicy(podAnnotation, "netready-sidecar-node-scope", "no"), podCondition: byPolicy(podCondition, "netready-sidecar-node-scope", "no")}),
			unknown: true, want: []string{"policy netready-sidecar-scope ("}},
		{name: "let through beats unknown", by: inForce(map[string]error{podLabel: freeze(podLabel), podAnnotation: freeze(podAnnotation), podCondition: freeze(podCondition), evReason: nil}),
			unscoped: true, want: []string{"(policy netready-sidecar-events)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &answers{by: tc.by}
			err := Check(context.Background(), a, me, time.Second)
			t.Logf("Check = %v", err)
			if len(tc.want) == 0 && err != nil {
				t.Fatalf("Check = %v, want nil", err)
			}
			for _, want := range tc.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Check = %v, want an error containing %q", err, want)
				}
			}
			if got := errors.Is(err, ErrUnscoped); got != tc.unscoped {
				t.Errorf("errors.Is(err, ErrUnscoped) = %v, want %v", got, tc.unscoped)
			}
			if got := errors.Is(err, ErrUnknown); got != tc.unknown {
				t.Errorf("errors.Is(err, ErrUnknown) = %v, want %v", got, tc.unknown)
			}
			if tc.asked != nil {
				if diff := cmp.Diff(tc.asked, a.asked); diff != "" {
					t.Errorf("probes sent (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestRBACRefusalIsKubeAPIServers: the refusal Check takes for RBAC's is
// the one kube-apiserver writes (responsewriters.ForbiddenStatusError).
func TestRBACRefusalIsKubeAPIServers(t *testing.T) {
	var got []string
	for _, pol := range policies(&answers{}, me) {
		for _, p := range pol.probes {
			got = append(got, p.rbacRefusal(sidecarUser))
		}
	}
	want := []string{
		`pods "me" is forbidden: User "` + sidecarUser + `" cannot patch resource "pods/status" in API group "" in the namespace "kube-system"`,
		`pods "me" is forbidden: User "` + sidecarUser + `" cannot patch resource "pods/status" in API group "" in the namespace "kube-system"`,
		`pods "me" is forbidden: User "` + sidecarUser + `" cannot patch resource "pods/status" in API group "" in the namespace "kube-system"`,
		`nodes "n" is forbidden: User "` + sidecarUser + `" cannot patch resource "nodes" in API group "" at the cluster scope`,
		`nodes "n" is forbidden: User "` + sidecarUser + `" cannot patch resource "nodes" in API group "" at the cluster scope`,
		`nodes "n" is forbidden: User "` + sidecarUser + `" cannot patch resource "nodes/status" in API group "" at the cluster scope`,
		`events.events.k8s.io is forbidden: User "` + sidecarUser + `" cannot create resource "events" in API group "events.k8s.io" in the namespace "kube-system"`,
		`events.events.k8s.io is forbidden: User "` + sidecarUser + `" cannot create resource "events" in API group "events.k8s.io" in the namespace "kube-system"`,
		`events.events.k8s.io is forbidden: User "` + sidecarUser + `" cannot create resource "events" in API group "events.k8s.io" in the namespace "default"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RBAC's refusals (-want +got):\n%s", diff)
	}
}
