//go:build integration

package cilium

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/kube"
)

// measureLabel selects the nodes whose sidecar measures propagation.
const measureLabel = "netready.io/measure-propagation"

// propagation is what node B's sidecar exported of the meter.
type propagation struct {
	count, upTo500ms           uint64
	busy, timeout, agentFailed float64
}

// TestCiliumPropagationIsMeasuredOnTheOtherNode is issue #52's measured
// propagation on two real cilium-agents: the real sidecar of node B,
// selected by its Node's label, with list and watch on CiliumEndpoints,
// observes once each pod started on node A after it began (not its own
// node's pods), as the time from its receiving the pod's CiliumEndpoint
// to B's agent's ipcache mapping the pod's IP to its identity; and with
// B's agent frozen while a pod starts on A, it observes the lag, above
// 0.5 s: the meter measures something that could fail.
func TestCiliumPropagationIsMeasuredOnTheOtherNode(t *testing.T) {
	b := agents.StartCiliumCrossNodeBed(t)
	grantCiliumEndpointWatch(t, b.API)
	ctx := context.Background()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, measureLabel)
	if _, err := b.API.Admin.CoreV1().Nodes().Patch(ctx, agents.CiliumNodeB, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	listen, logs := kube.StartSidecar(t, b.API, t.TempDir(), agents.CiliumNodeB, "--cni-conf-dir=",
		"--measure-cilium-propagation="+measureLabel+"=true", "--cilium-socket="+b.B.Sock)
	for start := time.Now(); !strings.Contains(logs.String(), "measuring Cilium propagation"); time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("node B's sidecar did not start measuring within 30 s:\n%s", logs.String())
		}
	}

	list := b.Chain(nil)
	const onA = 5
	for i := range onA {
		if _, _, _, err := b.Add(list, fmt.Sprintf("prop-%d", i), "web"); err != nil {
			t.Fatalf("ADD prop-%d on %s: %v\n%s", i, agents.CiliumNodeA, err, b.A.Log(40))
		}
	}
	// A pod on B itself is B's agent's own: not measured.
	cniB := b.B.CNI(t, filepath.Join(t.TempDir(), "b"))
	if _, _, err := b.B.AddPod(t, cniB, list, "prop-on-b", "web"); err != nil {
		t.Fatalf("ADD prop-on-b on %s: %v\n%s", agents.CiliumNodeB, err, b.B.Log(40))
	}
	waitObserved(t, listen, onA)
	time.Sleep(2 * time.Second) // nothing more comes: no pod counted twice, B's not at all
	got := scrapePropagation(t, listen)
	if got.count != onA {
		t.Errorf("node B observed %d propagations, want %d (the pods started on A)", got.count, onA)
	}
	t.Logf("after %d pods on A: %+v", onA, got)

	b.Frozen(func() {
		if _, _, _, err := b.Add(list, "prop-frozen", "web"); err != nil {
			t.Errorf("ADD prop-frozen on %s: %v\n%s", agents.CiliumNodeA, err, b.A.Log(40))
			return
		}
		// Published while B is frozen: B's sidecar has it, B's agent not.
		for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
			if _, _, identity, ok := b.CiliumEndpoint("prop-frozen"); ok && identity > 5 {
				break
			}
			if time.Since(start) > 20*time.Second {
				t.Errorf("prop-frozen's CiliumEndpoint not published within 20 s")
				return
			}
		}
		time.Sleep(1500 * time.Millisecond)
	})
	got = waitObserved(t, listen, onA+1)
	t.Logf("after prop-frozen: %+v", got)
	if got.count != onA+1 || got.count-got.upTo500ms < 1 {
		t.Errorf("after a pod started on A while B's agent was frozen: %d observations, %d of them above 0.5 s; want %d, at least 1 above 0.5 s", got.count, got.count-got.upTo500ms, onA+1)
	}
	if got.busy+got.timeout+got.agentFailed != 0 {
		t.Errorf("unmeasured: busy %v, timeout %v, agent %v; want none", got.busy, got.timeout, got.agentFailed)
	}
}

// grantCiliumEndpointWatch gives the sidecar's ServiceAccount list and
// watch on CiliumEndpoints, which the meter needs (deploy/'s Cilium RBAC
// grants get only).
func grantCiliumEndpointWatch(t *testing.T, a *kube.APIServer) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "netready-test-cep-watch"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumendpoints"}, Verbs: []string{"list", "watch"}}}}
	if _, err := a.Admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "netready-test-cep-watch"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "netready-sidecar"}}}
	if _, err := a.Admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitObserved waits up to 45 s for the sidecar at listen to have
// observed at least n propagations.
func waitObserved(t *testing.T, listen string, n uint64) propagation {
	t.Helper()
	var got propagation
	for start := time.Now(); time.Since(start) < 45*time.Second; time.Sleep(200 * time.Millisecond) {
		if got = scrapePropagation(t, listen); got.count >= n {
			return got
		}
	}
	t.Fatalf("node B's sidecar observed %d propagations within 45 s, want %d: %+v", got.count, n, got)
	return got
}

// scrapePropagation reads the meter's series from the sidecar's /metrics.
func scrapePropagation(t *testing.T, listen string) propagation {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(kube.MetricsText(t, listen)))
	if err != nil {
		t.Fatal(err)
	}
	var p propagation
	if f := families["netready_cilium_propagation_seconds"]; f != nil && len(f.GetMetric()) == 1 {
		h := f.GetMetric()[0].GetHistogram()
		p.count = h.GetSampleCount()
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == 0.5 {
				p.upTo500ms = b.GetCumulativeCount()
			}
		}
	}
	if f := families["netready_cilium_propagation_unmeasured_total"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetValue() {
				case "busy":
					p.busy = m.GetCounter().GetValue()
				case "timeout":
					p.timeout = m.GetCounter().GetValue()
				case "agent":
					p.agentFailed = m.GetCounter().GetValue()
				}
			}
		}
	}
	return p
}
