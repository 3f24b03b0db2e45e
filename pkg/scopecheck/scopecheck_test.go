package scopecheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// answers gives each probe its answer, by the resource it writes.
type answers map[string]error

func (a answers) PatchPodStatus(context.Context, string, string, types.PatchType, []byte) error {
	return a["pods/status"]
}

func (a answers) PatchNode(context.Context, string, types.PatchType, []byte, ...string) (*corev1.Node, error) {
	return &corev1.Node{}, a["nodes"]
}
func (a answers) CreateEvent(context.Context, *eventsv1.Event) error { return a["events"] }

// TestCheck: only Forbidden counts as refused; an allowed probe names
// its policy; any other error is "unknown", never "in force".
func TestCheck(t *testing.T) {
	// Refusals as kube-apiserver words them.
	byPolicy := func(r, policy string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: r}, "x",
			fmt.Errorf("ValidatingAdmissionPolicy 'acme-%s-x' with binding 'acme-%s-x' denied request: no", policy, policy))
	}
	all := answers{"pods/status": byPolicy("pods", "netready-sidecar-scope"), "nodes": byPolicy("nodes", "netready-sidecar-node-scope"),
		"events": byPolicy("events", "netready-sidecar-events")}
	byRBAC := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n",
		errors.New(`User "system:serviceaccount:kube-system:netready-sidecar" cannot patch resource "nodes" in API group "" at the cluster scope`))
	byWebhook := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "me",
		errors.New(`admission webhook "validate.kyverno.svc" denied the request: labels are immutable`))
	for _, tc := range []struct {
		name    string
		answers answers
		// want is "" for nil, else a substring of the error.
		want     string
		unscoped bool
	}{
		{"every probe refused", all, "", false},
		{"nothing refused", answers{}, "policy netready-sidecar-scope), a label on its own Node (policy netready-sidecar-node-scope), an Event", true},
		{"the events policy missing", answers{"pods/status": all["pods/status"], "nodes": all["nodes"]}, "(policy netready-sidecar-events)", true},
		{"the API server unreachable", answers{"pods/status": errors.New("connection refused")}, "dry-run a label on its own pod through pods/status: connection refused", false},
		{"refused by RBAC", answers{"pods/status": all["pods/status"], "nodes": byRBAC, "events": all["events"]}, "", false},
		{"refused by another webhook", answers{"pods/status": byWebhook}, "not by the policy netready-sidecar-scope or RBAC", false},
		{"refused by another netready policy", answers{"pods/status": all["nodes"]}, "not by the policy netready-sidecar-scope", false},
		{"own pod not found", answers{"pods/status": apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "me")}, "not found", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(context.Background(), tc.answers, Self{Node: "n", PodNamespace: "kube-system", PodName: "me"}, time.Second)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want an error containing %q", err, tc.want)
			}
			if got := errors.Is(err, ErrUnscoped); got != tc.unscoped {
				t.Errorf("errors.Is(err, ErrUnscoped) = %v, want %v", got, tc.unscoped)
			}
		})
	}
}
