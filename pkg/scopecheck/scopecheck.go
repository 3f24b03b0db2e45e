// Package scopecheck owns the sidecar's proof, before it writes anything
// and again while it runs, that the admission policies narrowing its
// writes are in force
// (deploy/admission.yaml). RBAC alone lets the sidecar change any pod's
// labels through pods/status, any Node, and Events anywhere; the policies
// are what keep it to its own condition on its own node's pods. A policy
// that is missing, not yet loaded or unbound admits everything, so the
// check asks the API server, in dry run, for writes each policy must
// refuse.
package scopecheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Self names the sidecar's own pod and node, the objects it probes with,
// and the user the API server knows it as, which RBAC's refusals name,
// with its groups, through which a ClusterRoleBinding can grant it the
// identity the policies know it by (decides.go).
type Self struct {
	Node, PodNamespace, PodName, User string
	Groups                            []string
}

// ErrUnscoped is wrapped by Check's error when a probe was let through.
var ErrUnscoped = errors.New("the admission policies that scope netready-sidecar are not in force")

// ErrUnknown is wrapped by Check's error when no probe was let through
// but another admission check refused every probe of a policy first: the
// API server names only the first refusal, so whether netready's policy
// would have refused them too cannot be told.
var ErrUnknown = errors.New("whether the admission policies that scope netready-sidecar are in force cannot be told")

// Check sends each policy's probes, in order, until one is let through
// or refused by that policy (its name survives a namePrefix or
// nameSuffix); a refusal in RBAC's own words (the sidecar cannot make
// that write at all) or by another admission check goes on to the next.
// It returns nil when every policy is proved in force; an error wrapping
// ErrUnscoped that names each probe let through; else the first other
// error (the API server unreachable: can't tell); else an error wrapping
// ErrUnknown that names, for each policy whose probes were all refused by
// others, who refused them.
func Check(ctx context.Context, w Writer, self Self, timeout time.Duration) error {
	var through, hidden []string
	var failed error
	for _, pol := range policies(w, self) {
		var others []string
		done := false
		for _, p := range pol.probes {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			err := p.write(pctx)
			cancel()
			who, how := refusal(err, p, pol.name, self.User)
			switch how {
			case answerThrough:
				through = append(through, fmt.Sprintf("%s (policy %s)", p.what, pol.name))
			case answerPolicy:
			case answerRBAC:
				continue
			case answerOther:
				if !slices.Contains(others, who) {
					others = append(others, who)
				}
				continue
			default:
				if failed == nil {
					failed = fmt.Errorf("dry-run %s: %w", p.what, err)
				}
			}
			done = true
			break
		}
		if !done && len(others) > 0 {
			hidden = append(hidden, fmt.Sprintf("%s (%s)", pol.name, strings.Join(others, "; ")))
		}
	}
	switch {
	case len(through) > 0:
		return fmt.Errorf("%w: the API server would have let it write %s. Apply deploy/ (or the Helm chart) whole, on Kubernetes 1.30 or later, and see that ValidatingAdmissionPolicies netready-sidecar-scope, netready-sidecar-node-scope and netready-sidecar-events (with any name prefix or suffix) and their bindings exist: kubectl get validatingadmissionpolicy,validatingadmissionpolicybinding. --require-scope=false runs without them, scoped by RBAC alone",
			ErrUnscoped, strings.Join(through, ", "))
	case failed != nil:
		return failed
	case len(hidden) > 0:
		return fmt.Errorf("%w: every dry-run probe of policy %s was refused first by another admission check, and the API server names only the first refusal. Let that check pass dry-run requests of %s (for a ValidatingAdmissionPolicy, a matchCondition !request.dryRun), or narrow it",
			ErrUnknown, strings.Join(hidden, ", and of policy "), self.User)
	}
	return nil
}

// how a probe was answered.
type answer int

const (
	notAdmission answer = iota // not an admission answer: can't tell
	answerThrough
	answerPolicy
	answerRBAC
	answerOther
)

// refusal says who answered p's write with err: netready's policy (named
// policy, with any prefix or suffix), RBAC in its own words for this
// user, or another admission check (who names it).
func refusal(err error, p probe, policy, user string) (who string, how answer) {
	if err == nil {
		return "", answerThrough
	}
	msg := err.Error()
	if apierrors.IsForbidden(err) && (msg == p.rbacRefusal(user) || strings.HasPrefix(msg, p.rbacRefusal(user)+": ")) {
		return "", answerRBAC
	}
	// A policy's refusal, whatever its reason (and so its code), is the
	// admission plugin's Forbidden message for this object.
	after, admission := p.afterAdmission(msg)
	if rest, ok := strings.CutPrefix(after, "ValidatingAdmissionPolicy '"); admission && ok {
		name, _, _ := strings.Cut(rest, "'")
		if strings.Contains(name, policy) {
			return "", answerPolicy
		}
		who = "ValidatingAdmissionPolicy '" + name + "'"
		if _, denial, ok := strings.Cut(rest, " denied request: "); ok {
			who += ": " + denial
		}
		return who, answerOther
	}
	// Webhooks: a refusal, one that does not support dry run, or one that
	// could not be called. The API server runs them after the policies,
	// but mutating ones before: the answer tells nothing of netready's.
	if strings.HasPrefix(msg, `admission webhook "`) || strings.Contains(msg, `failed calling webhook "`) {
		return msg, answerOther
	}
	if apierrors.IsForbidden(err) && admission {
		return msg, answerOther // another admission plugin
	}
	return "", notAdmission
}
