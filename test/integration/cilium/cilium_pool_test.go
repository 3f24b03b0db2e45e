//go:build integration

package cilium

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// ciliumPoolCIDR is the Node's podCIDR in TestCiliumPoolExhaustionTaintsTheNode: a
// /28, 14 addresses by Cilium's count, one of them the router's.
const ciliumPoolCIDR = "10.200.95.0/28"

// TestCiliumPoolExhaustionTaintsTheNode: a real cilium-agent whose Node has a /28
// podCIDR, and pods added with the real cilium-cni until the agent
// refuses one. STATUS with poolAction "notready" then fails with code 50,
// naming Cilium's own count; the real sidecar (poolAction "taint") taints
// the Node; the real kubectl-netready shows the pool exhausted with its
// count, and names it for the refused pod, Pending on the Node; deleting
// pods lifts the taint.
func TestCiliumPoolExhaustionTaintsTheNode(t *testing.T) {
	a := kube.StartAPIServer(t)
	cil := agents.StartRealCilium(t, a, ciliumPoolCIDR)
	ctx := context.Background()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "cilium-cni"), []byte(fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s env CILIUM_SOCK=%s %s \"$@\"\n",
		cil.Netns, cil.Sock, filepath.Join(cil.Bins, "cilium-cni"))), 0o755)
	harness.CopyFile(t, filepath.Join(harness.BinDir, "netready"), filepath.Join(bin, "netready"), 0o755)
	cni := libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"), nil)
	list := cnitest.AgentChain(t, "cilium", map[string]any{"type": "cilium-cni"}, nil)
	ipam := map[string]any{"type": "cilium", "socket": "unix://" + cil.Sock}

	src, err := pool.New("cilium", mustJSON(t, ipam))
	if err != nil {
		t.Fatal(err)
	}
	// counted reads the agent until its count (refreshed every 5 s by its
	// status collector) is want.
	counted := func(want string) {
		t.Helper()
		var got string
		harness.Within(t, "Cilium's count "+want, 15*time.Second, func() bool {
			cnt, _ := src.Read(ctx, &pool.Memo{})
			got = fmt.Sprintf("%+v", cnt)
			return cnt.Unknown == "" && len(cnt.Ranges) == 1 && cnt.Ranges[0].Set == ciliumPoolCIDR &&
				fmt.Sprintf("%d/%s", cnt.Ranges[0].Used, cnt.Ranges[0].Usable) == want
		})
		t.Logf("Cilium's count: %s", got)
	}
	// The router's address is Cilium's first: it counts as allocated.
	counted("1/14")

	var pods []*libcni.RuntimeConf
	del := func(rt *libcni.RuntimeConf) {
		if err := cni.DelNetworkList(ctx, list, rt); err != nil {
			t.Errorf("DEL %s: %v", rt.ContainerID, err)
		}
	}
	t.Cleanup(func() {
		for _, rt := range pods {
			cni.DelNetworkList(ctx, list, rt)
		}
	})
	var refused error
	for i := 0; i < 20 && refused == nil; i++ {
		name := fmt.Sprintf("pool-%d", i)
		pod := a.Create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PodSpec{NodeName: agents.CiliumNode, Containers: []corev1.Container{{Name: "c", Image: "x"}}}})
		rt := &libcni.RuntimeConf{ContainerID: "cilpool-" + name + "-" + harness.RandomHex(3), NetNS: cnitest.NewNS(t).Path(), IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}, {"K8S_POD_UID", string(pod.UID)}}}
		if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
			refused = err
			cni.DelNetworkList(ctx, list, rt)
			break
		}
		pods = append(pods, rt)
	}
	if refused == nil {
		t.Fatalf("the agent gave out 20 addresses from a /28:\n%s", cil.Log(40))
	}
	t.Logf("the agent refused pod %d: %v", len(pods)+1, refused)
	// The pod the agent refused stays Pending on the node, as kubelet's
	// sandbox retries would leave it.
	refusedPod := fmt.Sprintf("pool-%d", len(pods))
	// The router's address and the pods' fill the /28.
	counted("14/14")
	full := fmt.Sprintf(`Cilium says \"IPv4: 14/14 allocated from %s\"`, ciliumPoolCIDR)

	t.Run("STATUS fails with code 50, naming Cilium's count", func(t *testing.T) {
		status := func() error {
			// netready's STATUS alone: cilium-cni answers STATUS for its
			// agent's health, not its pool.
			l := cnitest.AgentChain(t, "cilium", map[string]any{"type": "netready", "stateDir": filepath.Join(dir, "state"),
				"status": map[string]any{"ipam": ipam, "poolAction": "notready"}}, nil)
			return cni.GetStatusNetworkList(ctx, l)
		}
		var err error
		// The agent refreshes its status every 5 s; STATUS keeps an
		// answer 3 s.
		harness.Within(t, "STATUS fails", 15*time.Second, func() bool { err = status(); return err != nil })
		if cnitest.CNICode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), "IP pool exhausted") || !strings.Contains(err.Error(), strings.ReplaceAll(full, `\"`, `"`)) {
			t.Errorf("STATUS = %v, want code 50: IP pool exhausted, %s", err, full)
		}
	})

	// The sidecar reads the real agent through a socket that can answer
	// 503 instead, as the agent does while it restarts in a rolling update.
	front, unavailable := agentFront(t, cil.Sock)
	confDir := t.TempDir()
	conf, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "cilium", "plugins": []any{
		map[string]any{"type": "cilium-cni"},
		map[string]any{"type": "netready", "status": map[string]any{"ipam": map[string]any{"type": "cilium", "socket": "unix://" + front}, "poolAction": "taint"}}}})
	os.WriteFile(filepath.Join(confDir, "05-cilium.conflist"), conf, 0o644)
	tw := kube.WatchTaint(t, a.Admin, agents.CiliumNode)
	listen, logs := kube.StartSidecar(t, a, t.TempDir(), agents.CiliumNode, "--cni-conf-dir", confDir)

	t.Run("the sidecar taints the Node", func(t *testing.T) {
		harness.Within(t, "the taint", 30*time.Second, func() bool { added, _ := tw.FirstTimes(); return !added.IsZero() })
		c := nodewriter.Current(a.Node(t, agents.CiliumNode))
		if c == nil || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "14 of 14 addresses in use") {
			t.Errorf("condition = %+v, want True naming Cilium's count\n%s", c, logs.String())
		}
		m := kube.MetricsText(t, listen)
		for _, want := range []string{
			`netready_pool_addresses{network="cilium",source="cilium",state="capacity"} 14`,
			`netready_pool_addresses{network="cilium",source="cilium",state="free"} 0`,
			`netready_pool_addresses{network="cilium",source="cilium",state="used"} 14`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s:\n%s", want, harness.GrepLines(m, "netready_pool"))
			}
		}
	})

	t.Run("kubectl netready names the exhausted pool", func(t *testing.T) {
		kc := a.Kubeconfig("admin", kube.AdminToken)
		netready := func(args ...string) (string, int) {
			out, err := exec.Command(filepath.Join(harness.BinDir, "kubectl-netready"), append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("kubectl-netready %v: %v", args, err)
			}
			return string(out), code
		}
		status, code := netready("status")
		row := regexp.MustCompile(`(?m)^` + agents.CiliumNode + `\s+cilium\s+cilium\s+0 of 14 free in ` + regexp.QuoteMeta(ciliumPoolCIDR) + `\s+1\s+exhausted$`)
		// Exit 1: an exhausted pool is a problem status names.
		if code != 1 || !row.MatchString(status) {
			t.Errorf("kubectl netready status: exit %d, want 1 and the row %s:\n%s", code, row, status)
		} else {
			t.Logf("kubectl netready status:\n%s", status)
		}
		out, code := netready("explain", "-n", "default", refusedPod)
		for _, want := range []string{
			fmt.Sprintf("pod default/%s on node %s is not gated: netready publishes no network readiness for it; node %s's IP pool is exhausted: cilium (cilium), 0 of 14 free in %s\n",
				refusedPod, agents.CiliumNode, agents.CiliumNode, ciliumPoolCIDR),
			fmt.Sprintf("pool:        cilium (cilium) on %s: 0 of 14 free in %s (minFree 1): exhausted\n", agents.CiliumNode, ciliumPoolCIDR),
			"to do:       free addresses on " + agents.CiliumNode + " (delete pods there that can go); for more per node, a larger per-node pod CIDR",
		} {
			if code != 1 || !strings.Contains(out, want) {
				t.Errorf("kubectl netready explain %s: exit %d, want 1 and %q:\n%s", refusedPod, code, want, out)
			}
		}
		t.Logf("kubectl netready explain %s:\n%s", refusedPod, out)
	})

	t.Run("a 503 from the agent holds the taint", func(t *testing.T) {
		removed := tw.RemovalCount()
		unavailable.Store(true)
		harness.Within(t, "the condition saying held", 15*time.Second, func() bool {
			c := nodewriter.Current(a.Node(t, agents.CiliumNode))
			return c != nil && strings.Contains(c.Message, "held: can't tell since ")
		})
		// Longer than the 7 s of an agent's restart: two polls or more.
		for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if !nodewriter.Has(a.Node(t, agents.CiliumNode)) {
				t.Fatalf("the taint was lifted while the agent answered 503\n%s", logs.String())
			}
		}
		unavailable.Store(false)
		if tw.RemovalCount() != removed {
			t.Errorf("the taint went and came back while the agent answered 503")
		}
		c := nodewriter.Current(a.Node(t, agents.CiliumNode))
		if c == nil || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "503 Service Unavailable") || !strings.Contains(c.Message, pool.HeldExhaustedMark) {
			t.Errorf("condition = %+v, want True, held, naming the 503", c)
		}
		// The agent's own count again: 14 of 14, still tainted, not held.
		harness.Within(t, "the condition counting again", 15*time.Second, func() bool {
			c := nodewriter.Current(a.Node(t, agents.CiliumNode))
			return c != nil && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, "14 of 14 addresses in use") && !strings.Contains(c.Message, "held")
		})
	})

	t.Run("deleting pods lifts the taint", func(t *testing.T) {
		for _, rt := range pods[len(pods)-3:] {
			del(rt)
		}
		pods = pods[:len(pods)-3]
		harness.Within(t, "the taint lifted", 30*time.Second, func() bool { _, removed := tw.FirstTimes(); return !removed.IsZero() })
		if nodewriter.Has(a.Node(t, agents.CiliumNode)) {
			t.Errorf("the Node still carries the taint\n%s", logs.String())
		}
	})
}

// agentFront serves a unix socket in front of the agent's: it passes each
// request through to the agent, or answers 503 while unavailable is set.
func agentFront(t *testing.T, agentSock string) (string, *atomic.Bool) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "front.sock")
	var unavailable atomic.Bool
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "cilium" },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", agentSock)
		}},
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if unavailable.Load() {
			http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock, &unavailable
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
