//go:build integration

package sidecar

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// ciliumHealthz stands in for cilium-agent's GET /v1/healthz on a unix
// socket, as the Cilium pool source reads it: ipam.status in the agent's
// own words, or 503 while status is "" (the agent restarting in its
// rolling update answers so until its status collector has run).
func ciliumHealthz(t *testing.T, sock string) *atomic.Value {
	t.Helper()
	var status atomic.Value
	status.Store("")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := status.Load().(string)
		if r.URL.Path != "/v1/healthz" || s == "" {
			http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"cilium":{"state":"Ok"},"ipam":{"status":%q}}`, s)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return &status
}

// TestCantTellHoldsTheTaint: the real sidecar on a real kube-apiserver,
// with the RBAC of deploy/, counting a Cilium pool from the agent's
// healthz. At 14 of 14 the node is tainted; while the agent answers 503
// (its own rolling update) the taint stays, the condition stays True and
// says "held: can't tell since …", kubectl netready status says the same,
// and one NetreadyPoolUnknown Event names the cause; once the agent says
// 5 of 14 the taint goes. A 503 while untainted adds no taint.
func TestCantTellHoldsTheTaint(t *testing.T) {
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	const node = "node-held"
	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "cilium.sock")
	agent := ciliumHealthz(t, sock)
	agent.Store("IPv4: 14/14 allocated from 10.200.95.0/28, ")
	confDir := t.TempDir()
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"cilium","plugins":[{"type":"cilium-cni"},{"type":"netready","status":{"ipam":{"type":"cilium","socket":"unix://%s"}}}]}`, sock)
	if err := os.WriteFile(filepath.Join(confDir, "05-cilium.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	tw := kube.WatchTaint(t, a.Admin, node)
	// No resync during the test: the held message is written when the
	// pool begins to hold, not at the next full round.
	_, logs, stop := kube.StartSidecarProc(t, a.AgentKubeconfig, t.TempDir(), node, "--cni-conf-dir", confDir, "--pool-resync", "1h")
	defer stop()
	condition := func() *corev1.NodeCondition { return nodewriter.Current(a.Node(t, node)) }
	unknownEvents := func() []string {
		evs, err := a.Admin.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Node" && e.Regarding.Name == node && e.Reason == "NetreadyPoolUnknown" {
				out = append(out, e.Type+" "+e.Note)
			}
		}
		return out
	}
	status := func() string {
		out, err := exec.Command(filepath.Join(harness.BinDir, "kubectl-netready"), "--kubeconfig", a.Kubeconfig("admin", kube.AdminToken), "status").CombinedOutput()
		if err != nil {
			t.Logf("kubectl netready status: %v", err)
		}
		return string(out)
	}
	held := regexp.MustCompile(`(?m)^` + node + `\s+cilium\s+cilium\s+-\s+1\s+held: can't tell since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: the Cilium agent: .*503 Service Unavailable`)

	harness.Within(t, "the taint at 14 of 14", 20*time.Second, func() bool { return taintedAndTrue(a.Node(t, node)) })

	t.Run("a 503 from the agent keeps the taint, and says held", func(t *testing.T) {
		removed := tw.RemovalCount()
		agent.Store("")
		began := time.Now()
		// 12 s: more than the 7 s of an agent's restart, two polls.
		never(t, "the taint was lifted while the agent answered 503", 12*time.Second, func() bool { return nodewriter.Has(a.Node(t, node)) })
		harness.Within(t, "the condition saying held", 5*time.Second, func() bool {
			c := condition()
			return c != nil && strings.Contains(c.Message, "held: can't tell since ")
		})
		if tw.RemovalCount() != removed {
			t.Errorf("the taint went and came back while the agent answered 503")
		}
		c := condition()
		if c == nil || c.Status != corev1.ConditionTrue || c.Reason != nodewriter.ReasonExhausted ||
			!strings.Contains(c.Message, "503 Service Unavailable") || !strings.Contains(c.Message, pool.HeldExhaustedMark) {
			t.Errorf("condition = %+v, want True, naming the 503 and the last verdict\n%s", c, logs.String())
		}
		if pools := pool.ParseLine(c.Message); len(pools) != 1 || pools[0].Since.Before(began.Add(-time.Second).Truncate(time.Second)) || pools[0].Since.After(time.Now()) {
			t.Errorf("pools = %+v, want one held since the 503s began (%s)", pools, began.UTC().Format(time.RFC3339))
		}
		if out := status(); !held.MatchString(out) {
			t.Errorf("kubectl netready status lacks the row %s:\n%s", held, out)
		}
		if evs := unknownEvents(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning ") || !strings.Contains(evs[0], "503 Service Unavailable") ||
			!strings.Contains(evs[0], "held as it was") {
			t.Errorf("NetreadyPoolUnknown Events = %q, want one Warning naming the 503 and the hold", evs)
		}
	})

	t.Run("room lifts the taint", func(t *testing.T) {
		agent.Store("IPv4: 5/14 allocated from 10.200.95.0/28, ")
		harness.Within(t, "the taint lifted at 5 of 14", 20*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
		harness.Within(t, "a False condition counting 5 of 14", 10*time.Second, func() bool {
			c := condition()
			return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "5 of 14 addresses in use") && !strings.Contains(c.Message, "held")
		})
	})

	t.Run("a 503 while untainted adds no taint", func(t *testing.T) {
		agent.Store("")
		harness.Within(t, "the condition saying held", 15*time.Second, func() bool {
			c := condition()
			return c != nil && strings.Contains(c.Message, "held: can't tell since ")
		})
		never(t, "the node was tainted while the agent answered 503", 7*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
		if c := condition(); c == nil || c.Status != corev1.ConditionFalse || strings.Contains(c.Message, pool.HeldExhaustedMark) {
			t.Errorf("condition = %+v, want False, held at room", c)
		}
		if evs := unknownEvents(); len(evs) != 2 {
			t.Errorf("NetreadyPoolUnknown Events = %q, want one per spell of can't tell (2)", evs)
		}
	})
}
