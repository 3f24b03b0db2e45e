//go:build integration

package agents

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// MeasureLabel selects the nodes whose sidecar measures Cilium's
// propagation: the chart's crossNode.measure.nodeSelector by default.
const MeasureLabel = "netready.io/measure-cilium-propagation"

// StartMeter labels node B, applies the meter's RBAC as deploy/ ships it
// (components/cilium-propagation), and starts B's real sidecar measuring
// with B's agent; it returns the sidecar's listen address once it says it
// measures.
func (b *CiliumCrossNodeBed) StartMeter(t testing.TB) string {
	t.Helper()
	b.API.ApplyRBAC(harness.RepoPath("deploy", "components", "cilium-propagation", "rbac.yaml"))
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, MeasureLabel)
	if _, err := b.API.Admin.CoreV1().Nodes().Patch(context.Background(), CiliumNodeB, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	listen, logs := kube.StartSidecar(t, b.API, t.TempDir(), CiliumNodeB, "--cni-conf-dir=",
		"--measure-cilium-propagation="+MeasureLabel+"=true", "--cilium-socket="+b.B.Sock)
	for start := time.Now(); !strings.Contains(logs.String(), "measuring Cilium propagation"); time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("node B's sidecar did not start measuring within 30 s:\n%s", logs.String())
		}
	}
	return listen
}
