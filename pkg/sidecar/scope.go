package sidecar

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/health"
	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/scopecheck"
	"github.com/netready/netready/pkg/writegate"
)

// ReasonScopeUnknown is the Warning Node Event's reason when the sidecar
// writes although its scope cannot be told (scopecheck.ErrUnknown).
const ReasonScopeUnknown = "NetreadyScopeUnknown"

// newProver makes the scope check that opens and closes gate: /readyz
// fails naming why while the writes are held, and says it (200) while
// the sidecar writes on an unknown scope, which a Warning Event on its
// Node says at once, and again while it lasts, before the last expires.
func newProver(o Options, client *kubeapi.REST, gate *writegate.Gate, h *health.Health, events kubeapi.EventRecorder, log *slog.Logger) *scopecheck.Prover {
	hold := o.ScopeUnknownHold
	if hold < 0 {
		hold = 0
	}
	report := func(v scopecheck.Verdict) {
		if v.Write {
			gate.Open()
			h.SetUnready("scope", nil)
			h.SetNote("scope", v.Err)
		} else {
			gate.Close(v.Err)
			h.SetNote("scope", nil)
			h.SetUnready("scope", v.Err)
		}
		if v.Warn {
			// As kubelet refers to its Node in Events: the UID is the name.
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.NodeName, UID: types.UID(o.NodeName)}}
			events.Eventf(node, nil, corev1.EventTypeWarning, ReasonScopeUnknown, "CheckScope",
				"writing after holding every write for %v: %v", hold, v.Err)
		}
	}
	return &scopecheck.Prover{Writer: client.DryRun(), Timeout: kubeapi.Timeout, MaxGap: 30 * time.Second,
		UnknownHold: hold, WarnEvery: kubeapi.RepeatWarningAfter, Report: report, Log: log}
}

// selfFunc says who the sidecar is: its pod from the flags or, without
// them (a DaemonSet from before them), from the API server, as its token
// is bound to it; and its user, which RBAC's refusals name.
func selfFunc(o Options, client *kubeapi.REST) func(context.Context) (scopecheck.Self, error) {
	return func(ctx context.Context) (scopecheck.Self, error) {
		s := scopecheck.Self{Node: o.NodeName, PodNamespace: o.PodNamespace, PodName: o.PodName}
		u, err := client.SelfUser(ctx)
		if err != nil {
			return s, err
		}
		s.User, s.Groups = u.Username, u.Groups
		if s.PodNamespace == "" || s.PodName == "" {
			s.PodNamespace, s.PodName, err = client.SelfPod(ctx)
		}
		return s, err
	}
}
