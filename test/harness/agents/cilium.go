//go:build integration

package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// RealCilium is a real cilium-agent (built from the module proxy by
// scripts/build-cilium.sh) in a netns of its own, against the test's
// kube-apiserver with Cilium's CRDs: kubernetes IPAM from the Node's
// podCIDR, VXLAN tunnel mode, CRD identities, no kube-proxy replacement,
// no L7 proxy, Hubble or health checks. Its state, socket, bpffs and
// cgroup2 are under the test's folder; nothing of the host's is used.
type RealCilium struct {
	t      testing.TB
	dir    string
	Netns  string
	Sock   string
	Bins   string
	node   string
	cmd    *exec.Cmd
	logs   *os.File
	apiURL string
	once   sync.Once
}

const CiliumNode = "nr-cil"

// StartRealCilium runs a real cilium-agent against a, with a Node of
// podCIDR, and stops it at cleanup.
func StartRealCilium(t testing.TB, a *kube.APIServer, podCIDR string) *RealCilium {
	t.Helper()
	bins := os.Getenv("NETREADY_CILIUM_BIN")
	if bins == "" {
		t.Fatal("NETREADY_CILIUM_BIN must name the cilium-agent build (scripts/build-cilium.sh); run `make test`")
	}
	dir, err := os.MkdirTemp("", "nr-cil-")
	if err != nil {
		t.Fatal(err)
	}
	c := &RealCilium{t: t, dir: dir, Netns: "nrcil-" + harness.RandomHex(3), Sock: filepath.Join(dir, "run", "cilium.sock"), Bins: bins, node: CiliumNode}
	t.Cleanup(c.Stop)
	for _, d := range []string{"run", "bpf", "cgroup", "lib"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	harness.MustRun(t, "mount", "-t", "bpf", "bpf", filepath.Join(dir, "bpf"))
	harness.MustRun(t, "mount", "-t", "cgroup2", "none", filepath.Join(dir, "cgroup"))
	harness.MustRun(t, "cp", "-r", filepath.Join(bins, "bpf"), filepath.Join(dir, "lib", "bpf"))
	// clang and llc for the agent's BPF compilation, as Cilium's image
	// names them.
	tools := filepath.Join(dir, "tools")
	os.MkdirAll(tools, 0o755)
	os.Symlink("/usr/bin/clang-19", filepath.Join(tools, "clang"))
	os.Symlink("/usr/bin/llc-19", filepath.Join(tools, "llc"))

	harness.MustRun(t, "ip", "netns", "add", c.Netns)
	harness.MustRun(t, "ip", "netns", "exec", c.Netns, "ip", "link", "set", "lo", "up")
	// The node's NIC: a veth whose other end stays on the host.
	harness.MustRun(t, "ip", "link", "add", "nrcilh", "type", "veth", "peer", "name", "nrcil0", "netns", c.Netns)
	harness.MustRun(t, "ip", "addr", "add", "10.200.97.1/30", "dev", "nrcilh")
	harness.MustRun(t, "ip", "link", "set", "nrcilh", "up")
	harness.MustRun(t, "ip", "netns", "exec", c.Netns, "ip", "addr", "add", "10.200.97.2/30", "dev", "nrcil0")
	harness.MustRun(t, "ip", "netns", "exec", c.Netns, "ip", "link", "set", "nrcil0", "up")
	harness.MustRun(t, "ip", "netns", "exec", c.Netns, "ip", "route", "add", "default", "via", "10.200.97.1")

	// The API server listens on the host's loopback: forward a loopback
	// port in the agent's netns to it.
	c.apiURL = c.forward(a.Port())
	kc := filepath.Join(dir, "kubeconfig")
	os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: %s}}]
contexts: [{name: test, context: {cluster: test, user: u}}]
current-context: test
`, c.apiURL, kube.AdminToken)), 0o600)

	crds, _ := filepath.Glob(filepath.Join(bins, "crds", "*.yaml"))
	for _, f := range crds {
		if out, err := a.KubectlRun("apply", "--server-side", "-f", f); err != nil {
			t.Fatalf("apply %s: %v\n%s", f, err, out)
		}
	}
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: CiliumNode}, Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}
	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.200.97.2"}}
	if _, err := a.Admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.start(kc)
	return c
}

// forward listens on a loopback port inside the agent's netns and copies
// each connection to the host's 127.0.0.1:port. It returns the URL.
func (c *RealCilium) forward(port int) string {
	var l net.Listener
	if err := ns.WithNetNSPath("/var/run/netns/"+c.Netns, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	}); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					return
				}
				defer out.Close()
				go io.Copy(out, in)
				io.Copy(in, out)
			}()
		}
	}()
	return "https://" + l.Addr().String()
}

func (c *RealCilium) start(kubeconfig string) {
	args := []string{"netns", "exec", c.Netns, filepath.Join(c.Bins, "cilium-agent"),
		"--k8s-kubeconfig-path=" + kubeconfig,
		"--ipam=kubernetes", "--routing-mode=tunnel", "--tunnel-protocol=vxlan",
		"--devices=nrcil0", "--kube-proxy-replacement=false", "--enable-ipv6=false", "--enable-ipv4=true",
		"--enable-l7-proxy=false", "--enable-hubble=false", "--enable-health-checking=false", "--enable-endpoint-health-checking=false",
		"--identity-allocation-mode=crd", "--cluster-name=default",
		"--bpf-root=" + filepath.Join(c.dir, "bpf"), "--cgroup-root=" + filepath.Join(c.dir, "cgroup"),
		"--state-dir=" + filepath.Join(c.dir, "run"), "--socket-path=" + c.Sock, "--lib-dir=" + filepath.Join(c.dir, "lib"),
		"--enable-ipv4-masquerade=false", "--enable-bpf-masquerade=false", "--install-no-conntrack-iptables-rules=false",
	}
	c.logs, _ = os.Create(filepath.Join(c.dir, "agent.log"))
	c.cmd = exec.Command("ip", args...)
	c.cmd.Env = append(os.Environ(), "K8S_NODE_NAME="+c.node, "PATH="+filepath.Join(c.dir, "tools")+":"+os.Getenv("PATH"))
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	start := time.Now()
	for !c.healthy() {
		if c.cmd.ProcessState != nil || time.Since(start) > 3*time.Minute {
			c.t.Fatalf("cilium-agent not healthy after %s:\n%s", time.Since(start).Round(time.Second), c.Log(80))
		}
		time.Sleep(500 * time.Millisecond)
	}
	c.t.Logf("cilium-agent healthy %s after start", time.Since(start).Round(100*time.Millisecond))
}

// healthy asks the agent itself, through cilium-dbg.
func (c *RealCilium) healthy() bool {
	out, err := exec.Command(filepath.Join(c.Bins, "cilium-dbg"), "-H", "unix://"+c.Sock, "status", "--brief").CombinedOutput()
	return err == nil && strings.Contains(string(out), "OK")
}

// Log is the last lines of the agent's log.
func (c *RealCilium) Log(lines int) string {
	data, _ := os.ReadFile(filepath.Join(c.dir, "agent.log"))
	return harness.Tail(string(data), lines)
}

// Stop ends the agent and removes everything it had; a second call does
// nothing.
func (c *RealCilium) Stop() { c.once.Do(c.teardown) }

func (c *RealCilium) teardown() {
	if c.cmd != nil && c.cmd.Process != nil {
		syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	if c.t.Failed() {
		c.t.Logf("cilium-agent log:\n%s", c.Log(60))
	}
	exec.Command("ip", "netns", "del", c.Netns).Run()
	exec.Command("ip", "link", "del", "nrcilh").Run()
	for _, m := range []string{"bpf", "cgroup"} {
		exec.Command("umount", "-l", filepath.Join(c.dir, m)).Run()
	}
	os.RemoveAll(c.dir)
}

// ciliumStages are the answers a Cilium agent gives for a fresh endpoint,
// in order, shaped as api/v1/openapi.yaml's Endpoint; nil is a 404.
var ciliumStages = []map[string]any{
	nil,
	{"id": 1742, "status": map[string]any{"state": "waiting-for-identity"}},
	{"id": 1742, "status": map[string]any{"state": "regenerating", "identity": map[string]any{"id": 5, "labels": []string{"reserved:init"}}}},
	{"id": 1742, "status": map[string]any{"state": "ready", "identity": map[string]any{"id": 5, "labels": []string{"reserved:init"}},
		"policy": map[string]any{"realized": map[string]any{"policy-revision": 7}, "spec": map[string]any{"policy-revision": 7}}}},
	{"id": 1742, "status": map[string]any{"state": "ready", "identity": map[string]any{"id": 48861, "labels": []string{"k8s:app=web"}},
		"policy": map[string]any{"realized": map[string]any{"policy-revision": 7}, "spec": map[string]any{"policy-revision": 8}}}},
	{"id": 1742, "status": map[string]any{"state": "ready", "identity": map[string]any{"id": 48861, "labels": []string{"k8s:app=web"}},
		"policy": map[string]any{"realized": map[string]any{"policy-revision": 8}, "spec": map[string]any{"policy-revision": 8}}}},
}

// CiliumAgent stands in for cilium-agent's REST API on a unix socket: each
// endpoint walks through ciliumStages, one stage per step after it is
// first asked for, or stays at stuck when that is >= 0.
type CiliumAgent struct {
	step  time.Duration
	stuck int

	mu        sync.Mutex
	firstSeen map[string]time.Time
}

// StartCiliumAgent serves the stand-in agent on sock: each endpoint moves
// one stage every step, and stays at stage stuck when that is >= 0.
func StartCiliumAgent(t testing.TB, sock string, step time.Duration, stuck int) *CiliumAgent {
	t.Helper()
	a := &CiliumAgent{step: step, stuck: stuck, firstSeen: map[string]time.Time{}}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(a.serve)}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return a
}

func (a *CiliumAgent) serve(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/v1/endpoint/")
	if !ok || !strings.HasPrefix(id, "cni-attachment-id:") {
		http.Error(w, "invalid endpoint ID", http.StatusBadRequest)
		return
	}
	stage := a.stage(id)
	if ciliumStages[stage] == nil {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(ciliumStages[stage])
}

func (a *CiliumAgent) stage(id string) int {
	if a.stuck >= 0 {
		return a.stuck
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	first, ok := a.firstSeen[id]
	if !ok {
		first = time.Now()
		a.firstSeen[id] = first
	}
	return min(int(time.Since(first)/a.step), len(ciliumStages)-1)
}

// LastStageAt is when the endpoint reached the programmed state.
func (a *CiliumAgent) LastStageAt(id string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.firstSeen[id].Add(time.Duration(len(ciliumStages)-1) * a.step)
}

// CiliumNet is conflists/cilium-chained.conflist with its cilium-cni entry
// taken out (the stand-in agent plays Cilium here) and the preset pointed
// at the test's socket.
func CiliumNet(t testing.TB, sock, timeout string) *cnitest.TestNet {
	return cnitest.NewNet(t, "cilium-chained.conflist", func(n *cnitest.TestNet, list map[string]any) {
		var chain []any
		for _, p := range cnitest.Plugins(list) {
			if p["type"] != "cilium-cni" {
				chain = append(chain, p)
			}
		}
		list["plugins"] = chain
		n.Netready()["timeout"] = timeout
		n.Netready()["checks"].([]any)[2].(map[string]any)["url"] = "unix://" + sock
	})
}
