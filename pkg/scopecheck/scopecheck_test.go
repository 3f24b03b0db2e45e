package scopecheck

import (
	"context"
	"errors"
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
	forbidden := func(r string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: r}, "x", errors.New("denied"))
	}
	all := answers{"pods/status": forbidden("pods"), "nodes": forbidden("nodes"), "events": forbidden("events")}
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
