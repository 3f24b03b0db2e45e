//go:build integration

package sidecar

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// writeNetwork writes a conflist whose first plugin is a bridge with this
// ipam, chained to netready with status.
func writeNetwork(t *testing.T, confDir, file, network, ipam, status string) {
	t.Helper()
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"bridge","bridge":"nrpool0","ipam":%s},{"type":"netready","status":%s}]}`, network, ipam, status)
	if err := os.WriteFile(filepath.Join(confDir, file), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
}

// never fails if ok stops holding within d; within fails if ok does not
// hold within limit.
func never(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if !ok() {
			t.Fatalf("%s", what)
		}
	}
}

// TestPoolTaint: the sidecar's pool watch at its edges, on a real
// kube-apiserver with the RBAC of deploy/, counting pools that the real
// host-local plugin fills and empties: a pool at exactly minFree, the
// hysteresis, a restart while tainted, a restart after the pool freed up,
// a dual-stack pool where only IPv6 runs out, the metrics, two sidecars
// at once on one node, and a pool that runs out while the API server is
// down.
func TestPoolTaint(t *testing.T) {
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	const node = "node-pool"
	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	confDir, data := t.TempDir(), t.TempDir()
	// A /29 is 5 addresses (.2-.6); minFree 2.
	netns := cnitest.NewNS(t).Path()
	v4 := &cnitest.HostLocal{Netns: netns, Network: "edge", IPAM: fmt.Sprintf(`{"type":"host-local","ranges":[[{"subnet":"10.77.0.0/29"}]],"dataDir":%q}`, data)}
	writeNetwork(t, confDir, "10-edge.conflist", "edge", v4.IPAM, `{"ipam":"auto","minFree":2}`)
	nt := kube.WatchTaint(t, a.Admin, node)
	state := t.TempDir()
	// No resync during the test: inotify alone must drive every change.
	args := []string{"--cni-conf-dir", confDir, "--pool-resync", "1h"}
	sidecar := func() (string, func()) {
		listen, _, stop := kube.StartSidecarProc(t, a.AgentKubeconfig, state, node, args...)
		return listen, stop
	}
	listen, stop := sidecar()
	condition := func() *corev1.NodeCondition { return nodewriter.Current(a.Node(t, node)) }

	t.Run("exactly minFree is not short", func(t *testing.T) {
		v4.Add(t, "c1", "c2", "c3")
		harness.Within(t, "the count of 3 of 5 in the metrics", 10*time.Second, func() bool {
			return strings.Contains(kube.MetricsText(t, listen), `netready_pool_free_addresses{network="edge",range="10.77.0.0/29"} 2`)
		})
		never(t, "the node was tainted with exactly minFree (2) addresses free", 3*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
		if c := condition(); c.Status != corev1.ConditionFalse || c.Reason != nodewriter.ReasonAvailable {
			t.Errorf("condition = %+v, want False", c)
		}
		if m := kube.MetricsText(t, listen); !strings.Contains(m, `netready_pool_free_addresses{network="edge",range="10.77.0.0/29"} 2`) ||
			!strings.Contains(m, `netready_pool_size{network="edge",range="10.77.0.0/29"} 5`) {
			t.Errorf("metrics lack the pool:\n%s", harness.GrepLines(m, "netready_pool"))
		}
	})
	t.Run("one below minFree taints, keeping the other taint", func(t *testing.T) {
		v4.Add(t, "c4")
		added := time.Now()
		harness.Within(t, "the taint", 5*time.Second, func() bool { return nodewriter.Has(a.Node(t, node)) })
		t.Logf("taint %d ms after host-local's ADD returned", time.Since(added).Milliseconds())
		harness.Within(t, "a True condition", 5*time.Second, func() bool { return taintedAndTrue(a.Node(t, node)) })
		n := a.Node(t, node)
		if !otherTaintKept(n) {
			t.Errorf("taints = %+v, want the other one kept", n.Spec.Taints)
		}
		if c := nodewriter.Current(n); c == nil || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "4 of 5 addresses in use") {
			t.Errorf("condition = %+v", c)
		}
		if m := kube.MetricsText(t, listen); !strings.Contains(m, "\nnetready_node_tainted 1\n") {
			t.Errorf("metrics do not show the taint:\n%s", harness.GrepLines(m, "netready_node_tainted"))
		}
	})
	t.Run("back at exactly minFree stays tainted (hysteresis)", func(t *testing.T) {
		v4.Del(t, "c4")
		never(t, "the taint went away at exactly minFree", 3*time.Second, func() bool { return nodewriter.Has(a.Node(t, node)) })
	})
	t.Run("a restart while tainted keeps a taint that still applies", func(t *testing.T) {
		removed := nt.RemovalCount()
		stop()
		listen, stop = sidecar()
		never(t, "the restarted sidecar lifted a taint that still applies", 3*time.Second, func() bool { return nodewriter.Has(a.Node(t, node)) })
		if nt.RemovalCount() != removed {
			t.Errorf("the taint was removed and added again during the restart")
		}
	})
	t.Run("minFree+1 lifts it", func(t *testing.T) {
		v4.Del(t, "c3")
		harness.Within(t, "the taint gone", 5*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
		harness.Within(t, "netready_node_tainted 0", 5*time.Second, func() bool { return strings.Contains(kube.MetricsText(t, listen), "\nnetready_node_tainted 0\n") })
		if n := a.Node(t, node); !otherTaintKept(n) {
			t.Errorf("taints = %+v, want the other one kept", n.Spec.Taints)
		}
	})
	t.Run("a restart leaves no taint behind that no longer applies", func(t *testing.T) {
		v4.Add(t, "c3", "c4")
		harness.Within(t, "the taint", 5*time.Second, func() bool { return nodewriter.Has(a.Node(t, node)) })
		stop()
		v4.Del(t, "c3", "c4") // freed while the sidecar was down
		listen, stop = sidecar()
		harness.Within(t, "the restarted sidecar lifting the stale taint", 10*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
	})
	t.Run("dual stack, only IPv6 runs out", func(t *testing.T) {
		dual := &cnitest.HostLocal{Netns: netns, Network: "dual", IPAM: fmt.Sprintf(`{"type":"host-local","ranges":[[{"subnet":"10.78.0.0/24"}],[{"subnet":"fd00:78::/125"}]],"dataDir":%q}`, data)}
		writeNetwork(t, confDir, "20-dual.conflist", "dual", dual.IPAM, `{"ipam":"auto"}`)
		var ids []string
		for i := 0; ; i++ {
			id := fmt.Sprintf("d%d", i)
			if err := dual.Run("ADD", id); err != nil {
				if !strings.Contains(err.Error(), "no IP addresses available") {
					t.Fatal(err)
				}
				break
			}
			ids = append(ids, id)
		}
		t.Logf("host-local handed out %d dual-stack pairs before IPv6 ran out", len(ids))
		harness.Within(t, "the taint and a True condition", 5*time.Second, func() bool { return taintedAndTrue(a.Node(t, node)) })
		c := condition()
		if c == nil || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, fmt.Sprintf("%d of %d addresses in use in fd00:78::/125", len(ids), len(ids))) ||
			!strings.Contains(c.Message, fmt.Sprintf("%d of 253 addresses in use in 10.78.0.0/24", len(ids))) {
			t.Errorf("condition = %+v, want IPv6 named as full and IPv4 counted", c)
		}
		m := kube.MetricsText(t, listen)
		if !strings.Contains(m, `netready_pool_free_addresses{network="dual",range="fd00:78::/125"} 0`) ||
			!strings.Contains(m, fmt.Sprintf(`netready_pool_free_addresses{network="dual",range="10.78.0.0/24"} %d`, 253-len(ids))) {
			t.Errorf("metrics:\n%s", harness.GrepLines(m, "netready_pool"))
		}
		dual.Del(t, ids[0], ids[1])
		harness.Within(t, "the taint gone once IPv6 has minFree+1", 5*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
		dual.Del(t, ids[2:]...)
	})
	t.Run("a half-written conflist or an invalid entry never lifts the taint", func(t *testing.T) {
		v4.Add(t, "c3", "c4")
		harness.Within(t, "the taint", 5*time.Second, func() bool { return nodewriter.Has(a.Node(t, node)) })
		// A vendor's rewrite caught half-way: an empty file.
		if err := os.WriteFile(filepath.Join(confDir, "10-edge.conflist"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		v4.Del(t, "c3", "c4")
		never(t, "the taint was lifted while the conflist was half-written", 2*time.Second, func() bool { return nodewriter.Has(a.Node(t, node)) })
		writeNetwork(t, confDir, "10-edge.conflist", "edge", v4.IPAM, `{"ipam":"auto","minFree":2,"poolAcion":"taint"}`)
		never(t, "the taint was lifted while the entry was invalid", 2*time.Second, func() bool { return nodewriter.Has(a.Node(t, node)) })
		writeNetwork(t, confDir, "10-edge.conflist", "edge", v4.IPAM, `{"ipam":"auto","minFree":2}`)
		harness.Within(t, "the taint gone once the entry is fixed", 5*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
	})
	t.Run("poolAction notready leaves the node untainted", func(t *testing.T) {
		writeNetwork(t, confDir, "10-edge.conflist", "edge", v4.IPAM, `{"ipam":"auto","minFree":2,"poolAction":"notready"}`)
		v4.Add(t, "c3", "c4")
		harness.Within(t, "the count", 5*time.Second, func() bool {
			return strings.Contains(kube.MetricsText(t, listen), `netready_pool_free_addresses{network="edge",range="10.77.0.0/29"} 1`)
		})
		never(t, "a notready pool tainted the node", 2*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
		v4.Del(t, "c1", "c2", "c3", "c4")
	})
	t.Run("a taint patch from a stale read is refused, never merged over a newer list", func(t *testing.T) {
		stale := a.Node(t, node)
		cur := a.Node(t, node)
		cur.Spec.Taints = append(cur.Spec.Taints, corev1.Taint{Key: "example.com/late", Effect: corev1.TaintEffectNoSchedule})
		if _, err := a.Admin.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := a.Admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, nodewriter.SpecPatch(stale, !nodewriter.Has(stale)), metav1.PatchOptions{})
		if !apierrors.IsConflict(err) {
			t.Errorf("the sidecar's taint patch built on a stale Node = %v, want a conflict", err)
		}
		if n := a.Node(t, node); !slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == "example.com/late" }) {
			t.Errorf("the newer taint was lost: %+v", n.Spec.Taints)
		}
		n := a.Node(t, node)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == "example.com/late" })
		if _, err := a.Admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("two sidecars on one node keep one taint and agree", func(t *testing.T) {
		// A rollout can overlap the old pod and the new one for a while.
		writeNetwork(t, confDir, "10-edge.conflist", "edge", v4.IPAM, `{"ipam":"auto","minFree":2}`)
		_, _, stop2 := kube.StartSidecarProc(t, a.AgentKubeconfig, t.TempDir(), node, args...)
		defer stop2()
		v4.Add(t, "c1", "c2", "c3", "c4")
		// The taint and the condition are two writes: wait for both.
		harness.Within(t, "the taint and a True condition", 5*time.Second, func() bool { return taintedAndTrue(a.Node(t, node)) })
		never(t, "two sidecars left other than one taint and a True condition", 2*time.Second, func() bool {
			n := a.Node(t, node)
			ours := slices.IndexFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == nodewriter.Key })
			return ours >= 0 && slices.IndexFunc(n.Spec.Taints[ours+1:], func(x corev1.Taint) bool { return x.Key == nodewriter.Key }) < 0 &&
				otherTaintKept(n) && taintedAndTrue(n)
		})
		v4.Del(t, "c3", "c4")
		harness.Within(t, "the taint gone", 5*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
		never(t, "one of the two sidecars put the taint back", 2*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
	})
	t.Run("a pool that runs out while the API server is down taints the node once it is back", func(t *testing.T) {
		// c1 and c2 are in use: 3 of 5 free, not short.
		a.StopAPI()
		v4.Add(t, "c3", "c4")
		time.Sleep(3 * time.Second) // the sidecar's attempts fail meanwhile
		a.StartAPI()
		harness.Within(t, "the taint and a True condition after the API server is back", 20*time.Second, func() bool { return taintedAndTrue(a.Node(t, node)) })
		if m := kube.MetricsText(t, listen); !strings.Contains(m, "netready_api_errors_total{reason=") {
			t.Errorf("no API errors counted across the outage:\n%s", harness.GrepLines(m, "api_errors"))
		}
		v4.Del(t, "c3", "c4")
		harness.Within(t, "the taint gone", 5*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
		v4.Del(t, "c1", "c2")
	})
	stop()
	// The other taint was never touched.
	if n := a.Node(t, node); !otherTaintKept(n) || nodewriter.Has(n) {
		t.Errorf("taints at the end = %+v", n.Spec.Taints)
	}
}

// taintedAndTrue: the node has netready's taint and its condition is True.
func taintedAndTrue(n *corev1.Node) bool {
	c := nodewriter.Current(n)
	return nodewriter.Has(n) && c != nil && c.Status == corev1.ConditionTrue
}

// otherTaintKept: the operator's taint is still there, unchanged.
func otherTaintKept(n *corev1.Node) bool {
	return slices.Contains(n.Spec.Taints, corev1.Taint{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule})
}

// TestPoolTaintEntryComesAndGoes: on a real kube-apiserver, the pool watch
// follows the entry where the runtime finds it, and keeps what it knows
// when the entry goes away for a while:
//   - an entry installed by netready-install --mode plugin-dir, in the
//     network's plugin folder, is watched like one in the conflist;
//   - a vendor's rewrite that drops the entry keeps the taint for
//     --pool-forget-after, and when the entry comes back at exactly
//     minFree, the hysteresis holds;
//   - an entry gone for longer is forgotten, and the taint lifted;
//   - a dataDir the sidecar does not see (not mounted) never lifts it.
func TestPoolTaintEntryComesAndGoes(t *testing.T) {
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	const node = "node-moves"
	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	confDir, data, bin := t.TempDir(), t.TempDir(), t.TempDir()
	netns := cnitest.NewNS(t).Path()
	pool := &cnitest.HostLocal{Netns: netns, Network: "moves", IPAM: fmt.Sprintf(`{"type":"host-local","ranges":[[{"subnet":"10.79.0.0/29"}]],"dataDir":%q}`, data)}
	primary := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"moves","plugins":[{"type":"bridge","bridge":"nrpool0","ipam":%s}]}`, pool.IPAM)
	conflist := filepath.Join(confDir, "10-moves.conflist")
	if err := os.WriteFile(conflist, []byte(primary), 0o644); err != nil {
		t.Fatal(err)
	}
	cnitest.RunInstaller(t, "--conf-dir", confDir, "--bin-dir", bin, "--mode", "plugin-dir", "--config", `{"status":{"ipam":"auto","minFree":2}}`)
	if _, err := os.Stat(filepath.Join(confDir, "moves", "netready.conf")); err != nil {
		t.Fatalf("the installer wrote no plugin-folder entry: %v", err)
	}
	forget := 4 * time.Second
	listen, _, stop := kube.StartSidecarProc(t, a.AgentKubeconfig, t.TempDir(), node, "--cni-conf-dir", confDir, "--pool-resync", "1h", "--pool-forget-after", forget.String())
	defer stop()
	tainted := func() bool { return nodewriter.Has(a.Node(t, node)) }

	t.Run("plugin-dir entry", func(t *testing.T) {
		pool.Add(t, "p1", "p2", "p3", "p4")
		harness.Within(t, "the taint for 4 of 5 in use", 5*time.Second, func() bool { return taintedAndTrue(a.Node(t, node)) })
		if m := kube.MetricsText(t, listen); !strings.Contains(m, `netready_pool_free_addresses{network="moves",range="10.79.0.0/29"} 1`) {
			t.Errorf("metrics lack the plugin-dir network's pool:\n%s", harness.GrepLines(m, "netready_pool"))
		}
	})
	t.Run("a rewrite without the entry keeps the taint, and the hysteresis when it returns", func(t *testing.T) {
		// The vendor rewrites its conflist in conflist mode's place: the
		// entry now lives in the file, then the file loses it.
		os.RemoveAll(filepath.Join(confDir, "moves"))
		writeNetwork(t, confDir, "10-moves.conflist", "moves", pool.IPAM, `{"ipam":"auto","minFree":2}`)
		time.Sleep(500 * time.Millisecond)
		writeAtomically(t, conflist, []byte(primary))
		pool.Del(t, "p4") // exactly minFree free
		never(t, "the taint was lifted while the entry was away", forget/2, tainted)
		writeNetwork(t, confDir, "10-moves.conflist", "moves", pool.IPAM, `{"ipam":"auto","minFree":2}`)
		never(t, "the returning entry at exactly minFree lost the hysteresis", forget+time.Second, tainted)
		if c := nodewriter.Current(a.Node(t, node)); c == nil || !strings.Contains(c.Message, "3 of 5 addresses in use") {
			t.Errorf("condition = %+v, want the pool counted", c)
		}
	})
	t.Run("an entry gone for longer is forgotten", func(t *testing.T) {
		writeAtomically(t, conflist, []byte(primary))
		harness.Within(t, "the condition saying the entry left", 5*time.Second, func() bool {
			c := nodewriter.Current(a.Node(t, node))
			return c != nil && strings.Contains(c.Message, "left the CNI config")
		})
		if !tainted() {
			t.Error("the taint went before --pool-forget-after")
		}
		harness.Within(t, "the taint lifted after --pool-forget-after", forget+5*time.Second, func() bool { return !tainted() })
	})
	t.Run("a dataDir the sidecar does not see never lifts the taint", func(t *testing.T) {
		writeNetwork(t, confDir, "10-moves.conflist", "moves", pool.IPAM, `{"ipam":"auto","minFree":2}`)
		pool.Add(t, "p4")
		harness.Within(t, "the taint", 5*time.Second, tainted)
		unmounted := fmt.Sprintf(`{"type":"host-local","ranges":[[{"subnet":"10.80.0.0/29"}]],"dataDir":%q}`, filepath.Join(data, "not-mounted"))
		writeNetwork(t, confDir, "20-unseen.conflist", "unseen", unmounted, `{"ipam":"auto"}`)
		pool.Del(t, "p3", "p4")
		never(t, "the taint was lifted while a dataDir could not be seen", 2*time.Second, tainted)
		c := nodewriter.Current(a.Node(t, node))
		if c == nil || !strings.Contains(c.Message, "dataDir "+filepath.Join(data, "not-mounted")+" does not exist here") {
			t.Errorf("condition = %+v, want the missing dataDir named", c)
		}
		os.Remove(filepath.Join(confDir, "20-unseen.conflist"))
		harness.Within(t, "the taint lifted once the unseen network is forgotten", forget+5*time.Second, func() bool { return !tainted() })
		pool.Del(t, "p1", "p2")
	})
}
