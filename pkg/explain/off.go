package explain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/offswitch"
)

// DefaultPolicy is the mutating policy that adds the readiness gate, as
// deploy/ and the chart name it. A kustomize namePrefix or nameSuffix
// renames it around this name.
const DefaultPolicy = "netready-readiness-gate"

// Off is the off switch as the API shows it (package offswitch).
type Off struct {
	// On: the ConfigMap exists, so every running sidecar releases its
	// node's gated pods and ADD waits on no check.
	On        bool      `json:"on"`
	ConfigMap string    `json:"configMap"`
	Since     time.Time `json:"since,omitzero"`
	Age       string    `json:"age,omitempty"`
	// By is the field manager that created the ConfigMap
	// (kubectl-netready, helm, kubectl-create): the tool, as the API
	// records it; the API keeps no user.
	By string `json:"by,omitempty"`
	// Policy is the mutating policy read, "" when there is none or it
	// was not read; PolicyOff says it holds the off matchCondition.
	Policy    string `json:"policy,omitempty"`
	PolicyOff bool   `json:"policyOff,omitempty"`
}

// OffState reads the off switch: its ConfigMap in netready's namespace
// and the mutating policy's matchCondition (o.Policy, or found as
// GatePolicy finds it). A policy that cannot be read is left out.
func OffState(ctx context.Context, c kubernetes.Interface, o Options) (*Off, error) {
	o.defaults()
	rd := &reader{c: c, o: o}
	off, err := rd.offSwitch(ctx)
	if err != nil {
		return nil, err
	}
	p, err := GatePolicy(ctx, c, o.Policy)
	switch {
	case apierrors.IsForbidden(err):
	case err != nil:
		return nil, err
	case p != nil:
		off.Policy = p.Name
		off.PolicyOff = slices.ContainsFunc(p.Spec.MatchConditions, func(m admissionv1.MatchCondition) bool { return m.Name == offswitch.MatchCondition })
	}
	return off, nil
}

// offSwitch reads the switch's ConfigMap; nil when a lenient reader was
// refused it.
func (rd *reader) offSwitch(ctx context.Context) (*Off, error) {
	ns := rd.o.Namespace
	off := &Off{ConfigMap: ns + "/" + offswitch.ConfigMapName}
	cm, err := rd.c.CoreV1().ConfigMaps(ns).Get(ctx, offswitch.ConfigMapName, metav1.GetOptions{})
	switch {
	case err == nil:
	case apierrors.IsNotFound(err):
		return off, nil
	case rd.skip(err, fmt.Sprintf("could not read ConfigMap %s (%s): whether netready is switched off is not known", off.ConfigMap, reason(err))):
		return nil, nil
	default:
		return nil, fmt.Errorf("read the off switch, ConfigMap %s: %w", off.ConfigMap, err)
	}
	off.On, off.Since = true, cm.CreationTimestamp.Time
	off.Age = age(rd.o.Now(), off.Since)
	var first *metav1.ManagedFieldsEntry
	for i := range cm.ManagedFields {
		if e := &cm.ManagedFields[i]; first == nil || e.Time != nil && (first.Time == nil || e.Time.Before(first.Time)) {
			first = e
		}
	}
	if first != nil {
		off.By = first.Manager
	}
	return off, nil
}

// GatePolicy returns the mutating policy that adds the readiness gate:
// the one named name; or, when name is "", DefaultPolicy, else the one
// policy whose name holds DefaultPolicy (a namePrefix or nameSuffix
// install). It returns nil when there is none, and an error naming them
// when several fit.
func GatePolicy(ctx context.Context, c kubernetes.Interface, name string) (*admissionv1.MutatingAdmissionPolicy, error) {
	policies := c.AdmissionregistrationV1().MutatingAdmissionPolicies()
	get := name
	if get == "" {
		get = DefaultPolicy
	}
	p, err := policies.Get(ctx, get, metav1.GetOptions{})
	switch {
	case err == nil:
		return p, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get MutatingAdmissionPolicy %s: %w", get, err)
	case name != "":
		return nil, nil
	}
	list, err := policies.List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err): // a cluster that serves none
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("list MutatingAdmissionPolicies: %w", err)
	}
	var fit []*admissionv1.MutatingAdmissionPolicy
	for i := range list.Items {
		if strings.Contains(list.Items[i].Name, DefaultPolicy) {
			fit = append(fit, &list.Items[i])
		}
	}
	switch len(fit) {
	case 0:
		return nil, nil
	case 1:
		return fit[0], nil
	}
	var names []string
	for _, p := range fit {
		names = append(names, p.Name)
	}
	return nil, fmt.Errorf("%d MutatingAdmissionPolicies could be netready's (%s): name one with --policy", len(fit), strings.Join(names, ", "))
}

// Line says, in one line, that netready is off or half off, with how
// to undo it; "" when it is on.
func (o *Off) Line() string {
	switch {
	case o == nil:
		return ""
	case o.On:
		s := "netready is OFF since " + o.Since.UTC().Format(time.RFC3339)
		if o.Age != "" {
			s += " (" + o.Age + " ago)"
		}
		if o.By != "" {
			s += ", by " + o.By
		}
		s += " (ConfigMap " + o.ConfigMap + "): each running sidecar releases its node's gated pods (True, reason NetreadyOff) and ADD waits on no check"
		if o.Policy != "" && !o.PolicyOff {
			s += "; the mutating policy " + o.Policy + " still adds gates (no matchCondition " + offswitch.MatchCondition + "), which the sidecars release"
		}
		return s + "; undo: kubectl netready on"
	case o.PolicyOff:
		return "netready is HALF OFF: the mutating policy " + o.Policy + " adds no gate (matchCondition " + offswitch.MatchCondition +
			"), but there is no ConfigMap " + o.ConfigMap + ": new pods start ungated, the sidecars judge gated pods as usual; " +
			"kubectl netready on (or off) makes it whole"
	}
	return ""
}
