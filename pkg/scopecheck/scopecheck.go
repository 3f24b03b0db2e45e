// Package scopecheck owns the sidecar's proof, before it writes anything
// and again while it runs, that the admission policies narrowing its
// writes are in force
// (deploy/admission.yaml). RBAC alone lets the sidecar change any pod's
// labels through pods/status, any Node, and Events anywhere; the policies
// are what keep it to its own condition on its own node's pods. A policy
// that is missing, not yet loaded, or bound to params it cannot find
// (an override that renamed them) admits everything, so the check asks
// the API server, in dry run, for one write each policy must refuse.
package scopecheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Writer is what the probes write through: the sidecar's own client, in
// dry run, so that they take the path its real writes take.
type Writer interface {
	PatchPodStatus(ctx context.Context, namespace, name string, pt types.PatchType, data []byte) error
	PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) (*corev1.Node, error)
	CreateEvent(ctx context.Context, ev *eventsv1.Event) error
}

// Self names the sidecar's own pod and node, the objects it probes with.
type Self struct {
	Node, PodNamespace, PodName string
}

// probeLabel is the label each probe tries to set; the policies refuse
// any label change by the sidecar.
const probeLabel = `{"metadata":{"labels":{"netready.io/scope-check":"must-be-refused"}}}`

// probeReason is a reason no part of netready records.
const probeReason = "NetreadyScopeCheck"

type probe struct {
	// what is written, and the policy that must refuse it.
	what, policy string
	write        func(ctx context.Context) error
}

func probes(w Writer, self Self) []probe {
	return []probe{
		{"a label on its own pod through pods/status", "netready-sidecar-scope", func(ctx context.Context) error {
			return w.PatchPodStatus(ctx, self.PodNamespace, self.PodName, types.MergePatchType, []byte(probeLabel))
		}},
		{"a label on its own Node", "netready-sidecar-node-scope", func(ctx context.Context) error {
			_, err := w.PatchNode(ctx, self.Node, types.MergePatchType, []byte(probeLabel))
			return err
		}},
		{"an Event with reason " + probeReason, "netready-sidecar-events", func(ctx context.Context) error {
			return w.CreateEvent(ctx, &eventsv1.Event{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "netready-scope-check-", Namespace: self.PodNamespace},
				EventTime:  metav1.NowMicro(), ReportingController: "netready-sidecar", ReportingInstance: "netready-sidecar-" + self.Node,
				Action: "Check", Reason: probeReason, Type: corev1.EventTypeNormal, Note: "must be refused",
				Regarding: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: self.PodNamespace, Name: self.PodName},
			})
		}},
	}
}

// refusedBy reports a Forbidden from the ValidatingAdmissionPolicy named
// policy (also with a prefix or suffix), or from RBAC. The API server runs
// the policies before any admission webhook, so netready's refusal is the
// one it returns when the policy is in force.
func refusedBy(err error, policy string) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "ValidatingAdmissionPolicy") && strings.Contains(msg, policy) ||
		strings.Contains(msg, "cannot ") // RBAC: User "…" cannot patch resource "…"
}

// ErrUnscoped is wrapped by Check's error when a probe was let through.
var ErrUnscoped = errors.New("the admission policies that scope netready-sidecar are not in force")

// Check sends every probe once. It returns nil when the API server
// refused each, by netready's policy (its name survives a namePrefix) or
// by RBAC (then the sidecar cannot make that kind of write at all); an
// error wrapping ErrUnscoped that names each probe it let through; or the
// first other error, a refusal by something else included: that proves
// nothing about netready's policy, and the answer is unknown.
func Check(ctx context.Context, w Writer, self Self, timeout time.Duration) error {
	var through []string
	for _, p := range probes(w, self) {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := p.write(pctx)
		cancel()
		switch {
		case err == nil:
			through = append(through, fmt.Sprintf("%s (policy %s)", p.what, p.policy))
		case refusedBy(err, p.policy):
		case apierrors.IsForbidden(err):
			return fmt.Errorf("dry-run %s was refused, but not by the policy %s or RBAC, so whether %s is in force is unknown: %w", p.what, p.policy, p.policy, err)
		default:
			return fmt.Errorf("dry-run %s: %w", p.what, err)
		}
	}
	if len(through) > 0 {
		return fmt.Errorf("%w: the API server would have let it write %s. Apply deploy/ whole (admission.yaml and netready-settings, labelled netready.io/params=settings, in the sidecar's namespace) on Kubernetes 1.30 or later; --require-scope=false runs without them, scoped by RBAC alone. If they are applied (kubectl get validatingadmissionpolicybinding netready-sidecar-scope), this API server may have stopped reading their ConfigMap params when their bindings were deleted and re-created, as an uninstall and reinstall does (kubernetes/kubernetes#130887): restart kube-apiserver",
			ErrUnscoped, strings.Join(through, ", "))
	}
	return nil
}

// Wait checks until every probe is refused, backing off from 1 s to
// maxGap, and reports each failed round to report (nil once in force).
// self says which pod and node the sidecar is; it is asked again after an
// error. Wait returns the Self it probed as once in force, or ctx's
// error.
func Wait(ctx context.Context, w Writer, self func(context.Context) (Self, error), timeout, maxGap time.Duration, report func(error), log *slog.Logger) (Self, error) {
	gap := time.Second
	var me *Self
	for {
		err := func() error {
			if me == nil {
				sctx, cancel := context.WithTimeout(ctx, timeout)
				s, err := self(sctx)
				cancel()
				if err != nil {
					return fmt.Errorf("which pod is this sidecar: %w; pass --pod-namespace and --pod-name (deploy/ sets POD_NAMESPACE and POD_NAME)", err)
				}
				me = &s
			}
			return Check(ctx, w, *me, timeout)
		}()
		report(err)
		if err == nil {
			log.Info("the admission policies that scope this sidecar are in force", "pod", me.PodNamespace+"/"+me.PodName)
			return *me, nil
		}
		log.Warn("not writing anything until the sidecar's scope is enforced", "err", err, "retryIn", gap)
		select {
		case <-ctx.Done():
			return Self{}, ctx.Err()
		case <-time.After(gap):
		}
		gap = min(2*gap, maxGap)
	}
}
