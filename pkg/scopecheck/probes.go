package scopecheck

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Writer is what the probes write through: the sidecar's own client, in
// dry run, so that they take the path its real writes take.
type Writer interface {
	PatchPodStatus(ctx context.Context, namespace, name string, pt types.PatchType, data []byte) error
	PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) (*corev1.Node, error)
	CreateEvent(ctx context.Context, ev *eventsv1.Event) error
}

// The probes' writes: each breaks a different rule of its policy, so that
// another policy that refuses one of them (labels are immutable, say)
// rarely refuses all, and netready's own refusal is the one named.
const (
	probeLabel      = `{"metadata":{"labels":{"netready.io/scope-check":"must-be-refused"}}}`
	probeAnnotation = `{"metadata":{"annotations":{"netready.io/scope-check":"must-be-refused"}}}`
	// probeCondition is a condition no part of netready sets.
	probeCondition = `{"status":{"conditions":[{"type":"netready.io/scope-check","status":"True"}]}}`
	// probeReason is a reason no part of netready records.
	probeReason = "NetreadyScopeCheck"
)

type probe struct {
	what string
	// The request as RBAC and the admission plugins word it: verb,
	// resource (with its subresource), API group, namespace ("" for a
	// Node) and the name in its URL ("" for a create); objectName is
	// the generateName of a create, from which admission names it.
	verb, resource, group, namespace, name, objectName string
	write                                              func(ctx context.Context) error
}

type policy struct {
	name   string
	probes []probe
}

func policies(w Writer, self Self) []policy {
	pod := func(what, patch string, pt types.PatchType) probe {
		return probe{what: what, verb: "patch", resource: "pods/status", namespace: self.PodNamespace, name: self.PodName,
			write: func(ctx context.Context) error {
				return w.PatchPodStatus(ctx, self.PodNamespace, self.PodName, pt, []byte(patch))
			}}
	}
	node := func(what, patch string, pt types.PatchType, sub ...string) probe {
		resource := strings.Join(append([]string{"nodes"}, sub...), "/")
		return probe{what: what, verb: "patch", resource: resource, name: self.Node,
			write: func(ctx context.Context) error {
				_, err := w.PatchNode(ctx, self.Node, pt, []byte(patch), sub...)
				return err
			}}
	}
	event := func(what, namespace string, ev eventsv1.Event) probe {
		ev.GenerateName, ev.Namespace, ev.EventTime = "netready-scope-check-", namespace, metav1.NowMicro()
		ev.Action, ev.Type, ev.Note = "Check", corev1.EventTypeNormal, "must be refused"
		if ev.ReportingController == "" {
			ev.ReportingController = "netready-sidecar"
		}
		ev.ReportingInstance = "netready-sidecar-" + self.Node
		return probe{what: what, verb: "create", resource: "events", group: eventsv1.GroupName, namespace: namespace, objectName: ev.GenerateName,
			write: func(ctx context.Context) error { return w.CreateEvent(ctx, &ev) }}
	}
	ownPod := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: self.PodNamespace, Name: self.PodName}
	return []policy{
		{"netready-sidecar-scope", []probe{
			pod("a label on its own pod through pods/status", probeLabel, types.MergePatchType),
			pod("an annotation on its own pod through pods/status", probeAnnotation, types.MergePatchType),
			pod("another condition on its own pod", probeCondition, types.StrategicMergePatchType),
		}},
		{"netready-sidecar-node-scope", []probe{
			node("a label on its own Node", probeLabel, types.MergePatchType),
			node("an annotation on its own Node", probeAnnotation, types.MergePatchType),
			node("another condition on its own Node", probeCondition, types.StrategicMergePatchType, "status"),
		}},
		{"netready-sidecar-events", []probe{
			event("an Event with reason "+probeReason, self.PodNamespace, eventsv1.Event{Reason: probeReason, Regarding: ownPod}),
			event("an Event as another controller", self.PodNamespace, eventsv1.Event{Reason: "NetworkProgrammed", ReportingController: "netready-scope-check", Regarding: ownPod}),
			event("an Event about another Node", metav1.NamespaceDefault, eventsv1.Event{Reason: "PodIPsExhausted",
				Regarding: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: self.Node + "-scope-check"}}),
		}},
	}
}

// sanitizer is kube-apiserver's, applied to its Forbidden messages.
var sanitizer = strings.NewReplacer(`&`, "&amp;", `<`, "&lt;", `>`, "&gt;")

func (p probe) groupResource() schema.GroupResource {
	resource, _, _ := strings.Cut(p.resource, "/")
	return schema.GroupResource{Group: p.group, Resource: resource}
}

// rbacRefusal is RBAC's refusal of p for user, in kube-apiserver's
// words (k8s.io/apiserver's responsewriters.ForbiddenStatusError), to
// which the authorizers' reasons may follow after ": ". A policy's or a
// webhook's refusal cannot take this form: theirs begin with their kind
// and name.
func (p probe) rbacRefusal(user string) string {
	scope := "at the cluster scope"
	if p.namespace != "" {
		scope = fmt.Sprintf("in the namespace %q", p.namespace)
	}
	msg := sanitizer.Replace(fmt.Sprintf("User %q cannot %s resource %q in API group %q %s", user, p.verb, p.resource, p.group, scope))
	return apierrors.NewForbidden(p.groupResource(), p.name, errors.New(msg)).Error()
}

// afterAdmission returns what follows an admission plugin's Forbidden
// message for p (k8s.io/apiserver's admission.NewForbidden): it names the
// object, and for a create with generateName, the name generated from it
// (kube-apiserver 1.36), or the generateName itself (older ones).
func (p probe) afterAdmission(msg string) (string, bool) {
	gr := p.groupResource().String()
	if p.name != "" {
		return strings.CutPrefix(msg, fmt.Sprintf("%s %q is forbidden: ", gr, p.name))
	}
	rest, ok := strings.CutPrefix(msg, gr+` "`+p.objectName)
	if !ok {
		return "", false
	}
	suffix, rest, ok := strings.Cut(rest, `" is forbidden: `)
	if !ok || strings.Trim(suffix, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return "", false
	}
	return rest, true
}
