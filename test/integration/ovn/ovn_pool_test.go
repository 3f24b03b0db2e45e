//go:build integration

package ovn

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/pkg/pool/ovn"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// TestOVNPoolExhaustionTaintsTheNode, on a real kube-apiserver with the
// RBAC of deploy/: a Node whose k8s.ovn.org/node-subnets is a /29 (four
// addresses once ovnkube's network, gateway, management port and
// broadcast are taken), and pods bound to it whose addresses kubelet
// posts (status.podIPs, through pods/status as the node). The real sidecar
// ("ipam": "auto" on an ovn-k8s-cni-overlay chain, poolAction taint)
// taints the Node when the subnet is used up and keeps its verdict; the
// real plugin's STATUS (poolAction notready) reads that verdict and fails
// with code 50 naming the ovn-kubernetes count; with the sidecar stopped
// and its verdict aged past a minute, STATUS cannot tell and passes; the
// restarted sidecar keeps the taint while its watches list; a terminated
// pod's address and a deleted pod's are free again, and the taint is
// lifted.
func TestOVNPoolExhaustionTaintsTheNode(t *testing.T) {
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	const node, network = "node-ovn-pool", "ovn-kubernetes"
	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Annotations: map[string]string{ovn.NodeSubnets: `{"default":["10.244.7.0/29"]}`}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// .3 to .6: what ovnkube gives pods from a /29.
	admin, kubelet := fastClient(a, "", nil), kubeletClient(t, a, node)
	addPod := func(name, ip string) {
		t.Helper()
		runPods(t, admin, kubelet, "default", node, name, []string{ip})
	}
	// A host-network pod holds no pod address: kubelet posts the node's
	// (here, as a misconfigured node would, one inside the subnet);
	// another node's pods are not this node's.
	hostnet := kube.PlainPod("default", "hostnet", node)
	hostnet.Spec.HostNetwork = true
	hostnet = a.Create(t, hostnet)
	hostnet.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.7.6", PodIPs: []corev1.PodIP{{IP: "10.244.7.6"}}}
	if _, err := kubelet.CoreV1().Pods("default").UpdateStatus(ctx, hostnet, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	runPods(t, admin, kubeletClient(t, a, "another-node"), "default", "another-node", "elsewhere", []string{"10.244.7.6"})
	for i, ip := range []string{"10.244.7.3", "10.244.7.4", "10.244.7.5"} {
		addPod(fmt.Sprintf("ovn-%d", i), ip)
	}

	state, confDir := t.TempDir(), t.TempDir()
	conf, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": network, "plugins": []any{
		map[string]any{"type": "ovn-k8s-cni-overlay", "ipam": map[string]any{}, "dns": map[string]any{}},
		map[string]any{"type": "netready", "stateDir": state, "status": map[string]any{"ipam": "auto", "poolAction": "taint"}}}})
	os.WriteFile(filepath.Join(confDir, "10-ovn-kubernetes.conflist"), conf, 0o644)
	tw := kube.WatchTaint(t, a.Admin, node)
	sidecar := func() (string, *harness.SyncBuffer, func()) {
		return kube.StartSidecarProc(t, a.AgentKubeconfig, t.TempDir(), node, "--cni-conf-dir", confDir)
	}
	listen, logs, stop := sidecar()

	bin := t.TempDir()
	harness.CopyFile(t, filepath.Join(harness.BinDir, "netready"), filepath.Join(bin, "netready"), 0o755)
	cni := libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(t.TempDir(), "cache"), nil)
	// netready's STATUS alone, as a node whose entry says notready would
	// run it: ovn-k8s-cni-overlay answers STATUS for its own health.
	status := func() error {
		l := cnitest.AgentChain(t, network, map[string]any{"type": "netready", "stateDir": state,
			"status": map[string]any{"ipam": map[string]any{"type": "ovn-kubernetes"}, "poolAction": "notready"}}, nil)
		return cni.GetStatusNetworkList(ctx, l)
	}
	verdictPath := pool.VerdictPath(state, network)

	t.Run("three of four: no taint, STATUS passes, the count in the metrics", func(t *testing.T) {
		harness.Within(t, "the count in the metrics", 20*time.Second, func() bool {
			return strings.Contains(kube.MetricsText(t, listen), `netready_pool_addresses{network="ovn-kubernetes",source="ovn-kubernetes",state="used"} 3`)
		})
		m := kube.MetricsText(t, listen)
		if !strings.Contains(m, `netready_pool_addresses{network="ovn-kubernetes",source="ovn-kubernetes",state="capacity"} 4`) {
			t.Errorf("metrics:\n%s", harness.GrepLines(m, "netready_pool"))
		}
		if err := status(); err != nil {
			t.Errorf("STATUS at 3 of 4 = %v, want success", err)
		}
		if nodewriter.Has(a.Node(t, node)) {
			t.Error("tainted at 3 of 4 with minFree 1")
		}
	})

	full := "ovn-kubernetes: 4 pods hold addresses in the node's subnet 10.244.7.0/29"
	t.Run("the subnet used up taints the Node", func(t *testing.T) {
		addPod("ovn-3", "10.244.7.6")
		harness.Within(t, "the taint", 20*time.Second, func() bool { added, _ := tw.FirstTimes(); return !added.IsZero() })
		c := nodewriter.Current(a.Node(t, node))
		if c == nil || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "ovn-kubernetes (ovn-kubernetes): 4 of 4 addresses in use") {
			t.Errorf("condition = %+v, want True naming the ovn-kubernetes count\n%s", c, logs.String())
		}
	})

	t.Run("STATUS fails with code 50, naming the count from the sidecar's verdict", func(t *testing.T) {
		var err error
		harness.Within(t, "STATUS fails", 15*time.Second, func() bool { err = status(); return err != nil })
		if cnitest.CNICode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), "IP pool exhausted (4 of 4 addresses in use)") ||
			!strings.Contains(err.Error(), full) || !strings.Contains(err.Error(), "netready-sidecar's count") {
			t.Errorf("STATUS = %v, want code 50: IP pool exhausted, %s, from the sidecar's verdict", err, full)
		}
	})

	t.Run("with the sidecar stopped, an aged verdict cannot tell: STATUS passes", func(t *testing.T) {
		removed := tw.RemovalCount()
		stop()
		// No knob ages a verdict faster than the contract's minute: date
		// the stopped sidecar's last one back, as a minute would.
		data, err := os.ReadFile(verdictPath)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatal(err)
		}
		v["at"] = time.Now().Add(-pool.VerdictMaxAge - 15*time.Second).Format(time.RFC3339Nano)
		data, _ = json.Marshal(v)
		os.WriteFile(verdictPath, data, 0o644)
		if err := status(); err != nil {
			t.Errorf("STATUS with a verdict 75 s old = %v, want success (cannot tell is never exhausted)", err)
		}
		if cnt := pool.ReadVerdict(verdictPath, "ovn-kubernetes", time.Now()); !strings.Contains(cnt.Unknown, "no verdict from netready-sidecar for 1m15s") {
			t.Errorf("the aged verdict = %+v, want cannot tell, naming its age", cnt)
		}
		os.Remove(verdictPath)
		if err := status(); err != nil {
			t.Errorf("STATUS with no verdict = %v, want success", err)
		}
		listen, logs, stop = sidecar()
		var serr error
		harness.Within(t, "STATUS failing again once the sidecar counts", 20*time.Second, func() bool { serr = status(); return serr != nil })
		if cnitest.CNICode(serr) != types.ErrPluginNotAvailable {
			t.Errorf("STATUS = %v, want code 50", serr)
		}
		// Its watches still listing, the restarted sidecar cannot tell at
		// first: that must not lift a taint that still applies.
		if tw.RemovalCount() != removed || !nodewriter.Has(a.Node(t, node)) {
			t.Errorf("the restarted sidecar lifted the taint while its watches were listing\n%s", logs.String())
		}
	})

	t.Run("a terminated pod's address and a deleted pod's are free: the taint is lifted", func(t *testing.T) {
		p, err := a.Admin.CoreV1().Pods("default").Get(ctx, "ovn-0-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodSucceeded
		if _, err := a.Admin.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		harness.Within(t, "STATUS passing at 3 of 4", 20*time.Second, func() bool { return status() == nil })
		if !nodewriter.Has(a.Node(t, node)) {
			t.Error("the taint lifted at 3 of 4: one address of hysteresis expected")
		}
		if err := a.Admin.CoreV1().Pods("default").Delete(ctx, "ovn-1-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		harness.Within(t, "the taint lifted at 2 of 4", 20*time.Second, func() bool { _, removed := tw.FirstTimes(); return !removed.IsZero() })
		// The taint (spec) is patched before the condition (status).
		var c *corev1.NodeCondition
		harness.Within(t, "the condition False", 10*time.Second, func() bool {
			c = nodewriter.Current(a.Node(t, node))
			return c != nil && c.Status == corev1.ConditionFalse
		})
		if !strings.Contains(c.Message, "2 of 4 addresses in use") {
			t.Errorf("condition = %+v, want False at 2 of 4\n%s", c, logs.String())
		}
		if m := kube.MetricsText(t, listen); !strings.Contains(m, `netready_pool_addresses{network="ovn-kubernetes",source="ovn-kubernetes",state="free"} 2`) {
			t.Errorf("metrics:\n%s", harness.GrepLines(m, "netready_pool"))
		}
	})
}
