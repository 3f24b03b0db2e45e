//go:build integration

package agents

import (
	"context"
	"fmt"
	"io"
	"net"
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
	"github.com/netready/netready/test/harness/kube"
)

// RealCilium is a real cilium-agent (built from the module proxy by
// scripts/build-cilium.sh) in a netns of its own, against the test's
// kube-apiserver with Cilium's CRDs: kubernetes IPAM from the Node's
// podCIDR, CRD identities, no kube-proxy replacement, no L7 proxy, Hubble
// or health checks. Its state, socket, bpffs and cgroup2 are under the
// test's folder, and its fixed paths (/var/run/cilium: the pid file, the
// monitor socket) in a mount namespace of its own, so that two agents run
// side by side and nothing of the host's is used.
type RealCilium struct {
	t      testing.TB
	dir    string
	Netns  string
	Sock   string
	Bins   string
	node   ciliumNode
	agent  *harness.Daemon
	logs   *os.File
	apiURL string
	api    *kube.APIServer
	once   sync.Once
}

// ciliumRunDir is where the agent keeps what no flag moves.
const ciliumRunDir = "/var/run/cilium"

// CiliumNode is the Node of StartRealCilium's agent.
const CiliumNode = "nr-cil"

// ciliumNode is what one agent's node is: its Node's name, podCIDR and
// InternalIP, its NIC in netns, and how pods' traffic leaves it.
type ciliumNode struct {
	name, podCIDR, ip, device, netns string
	// native: native routing with direct routes to the other nodes'
	// podCIDRs (auto-direct-node-routes) within nativeCIDR; else VXLAN.
	native     bool
	nativeCIDR string
}

// StartRealCilium runs a real cilium-agent against a, with a Node of
// podCIDR, in tunnel mode on a veth to the host, and stops it at cleanup.
func StartRealCilium(t testing.TB, a *kube.APIServer, podCIDR string) *RealCilium {
	t.Helper()
	netns := "nrcil-" + harness.RandomHex(3)
	harness.MustRun(t, "ip", "netns", "add", netns)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", netns).Run()
		exec.Command("ip", "link", "del", "nrcilh").Run()
	})
	harness.MustRun(t, "ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up")
	// The node's NIC: a veth whose other end stays on the host.
	harness.MustRun(t, "ip", "link", "add", "nrcilh", "type", "veth", "peer", "name", "nrcil0", "netns", netns)
	harness.MustRun(t, "ip", "addr", "add", "10.200.97.1/30", "dev", "nrcilh")
	harness.MustRun(t, "ip", "link", "set", "nrcilh", "up")
	harness.MustRun(t, "ip", "netns", "exec", netns, "ip", "addr", "add", "10.200.97.2/30", "dev", "nrcil0")
	harness.MustRun(t, "ip", "netns", "exec", netns, "ip", "link", "set", "nrcil0", "up")
	harness.MustRun(t, "ip", "netns", "exec", netns, "ip", "route", "add", "default", "via", "10.200.97.1")
	ApplyCiliumCRDs(t, a)
	return launchCilium(t, a, ciliumNode{name: CiliumNode, podCIDR: podCIDR, ip: "10.200.97.2", device: "nrcil0", netns: netns})
}

// ApplyCiliumCRDs gives a the CRDs of the Cilium build.
func ApplyCiliumCRDs(t testing.TB, a *kube.APIServer) {
	t.Helper()
	crds, _ := filepath.Glob(filepath.Join(ciliumBins(t), "crds", "*.yaml"))
	for _, f := range crds {
		if out, err := a.KubectlRun("apply", "--server-side", "-f", f); err != nil {
			t.Fatalf("apply %s: %v\n%s", f, err, out)
		}
	}
}

func ciliumBins(t testing.TB) string {
	bins := os.Getenv("NETREADY_CILIUM_BIN")
	if bins == "" {
		t.Fatal("NETREADY_CILIUM_BIN must name the cilium-agent build (scripts/build-cilium.sh); run `make test`")
	}
	return bins
}

// launchCilium creates n's Node on a and runs its agent in n.netns, whose
// NIC is set up; it returns once the agent says it is healthy, and stops
// it at cleanup.
func launchCilium(t testing.TB, a *kube.APIServer, n ciliumNode) *RealCilium {
	t.Helper()
	bins := ciliumBins(t)
	dir, err := os.MkdirTemp("", "nr-cil-")
	if err != nil {
		t.Fatal(err)
	}
	c := &RealCilium{t: t, dir: dir, Netns: n.netns, Sock: filepath.Join(dir, "run", "cilium.sock"), Bins: bins, node: n, api: a}
	// The mount point of the agent's /var/run/cilium; removed after the
	// last agent that needed it stopped (cleanups run last first).
	if _, err := os.Stat(ciliumRunDir); os.IsNotExist(err) {
		if err := os.MkdirAll(ciliumRunDir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(ciliumRunDir) })
	}
	t.Cleanup(c.Stop)
	for _, d := range []string{"run", "bpf", "cgroup", "lib", "varrun"} {
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

	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}, Spec: corev1.NodeSpec{PodCIDR: n.podCIDR, PodCIDRs: []string{n.podCIDR}}}
	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip}}
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
	routing := []string{"--routing-mode=tunnel", "--tunnel-protocol=vxlan"}
	if c.node.native {
		routing = []string{"--routing-mode=native", "--ipv4-native-routing-cidr=" + c.node.nativeCIDR, "--auto-direct-node-routes=true",
			"--direct-routing-device=" + c.node.device}
	}
	agent := append([]string{filepath.Join(c.Bins, "cilium-agent"),
		"--k8s-kubeconfig-path=" + kubeconfig,
		"--ipam=kubernetes", "--devices=" + c.node.device,
		"--kube-proxy-replacement=false", "--bpf-lb-sock=false", "--enable-ipv6=false", "--enable-ipv4=true",
		"--enable-l7-proxy=false", "--enable-hubble=false", "--enable-health-checking=false", "--enable-endpoint-health-checking=false",
		"--identity-allocation-mode=crd", "--cluster-name=default",
		"--bpf-root=" + filepath.Join(c.dir, "bpf"), "--cgroup-root=" + filepath.Join(c.dir, "cgroup"),
		"--state-dir=" + filepath.Join(c.dir, "run"), "--socket-path=" + c.Sock, "--lib-dir=" + filepath.Join(c.dir, "lib"),
		"--enable-ipv4-masquerade=false", "--enable-bpf-masquerade=false", "--install-no-conntrack-iptables-rules=false",
	}, routing...)
	// ip netns exec gives the agent a mount namespace of its own: bind a
	// folder of the test's over /var/run/cilium there, for the paths the
	// agent does not take from flags (launchCilium made the mount point).
	wrap := fmt.Sprintf("mount --make-rprivate / && mount --bind %s "+ciliumRunDir+" && exec \"$0\" \"$@\"", filepath.Join(c.dir, "varrun"))
	c.logs, _ = os.Create(filepath.Join(c.dir, "agent.log"))
	cmd := exec.Command("ip", append([]string{"netns", "exec", c.Netns, "sh", "-c", wrap}, agent...)...)
	cmd.Env = append(os.Environ(), "K8S_NODE_NAME="+c.node.name, "PATH="+filepath.Join(c.dir, "tools")+":"+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = c.logs, c.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var err error
	if c.agent, err = harness.StartDaemon(cmd); err != nil {
		c.t.Fatal(err)
	}
	start := time.Now()
	for !c.healthy() {
		dead, how := c.agent.Dead()
		if dead || time.Since(start) > 3*time.Minute {
			c.t.Fatalf("cilium-agent of %s not healthy after %s (exited: %v %s):\n%s", c.node.name, time.Since(start).Round(time.Second), dead, how, c.Log(80))
		}
		time.Sleep(500 * time.Millisecond)
	}
	c.t.Logf("cilium-agent of %s healthy %s after start", c.node.name, time.Since(start).Round(100*time.Millisecond))
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
	if c.agent != nil {
		// A frozen agent ignores SIGTERM until it is continued.
		c.agent.Signal(syscall.SIGCONT)
		c.agent.Stop(syscall.SIGTERM, 20*time.Second)
	}
	if c.t.Failed() {
		c.t.Logf("cilium-agent log:\n%s", c.Log(60))
	}
	for _, m := range []string{"bpf", "cgroup"} {
		exec.Command("umount", "-l", filepath.Join(c.dir, m)).Run()
	}
	os.RemoveAll(c.dir)
}

// Freeze stops (SIGSTOP) or continues the agent: its datapath goes on
// as it was, but it learns nothing from the API server meanwhile.
func (c *RealCilium) Freeze(stop bool) {
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	if dead, how := c.agent.Dead(); dead {
		c.t.Fatalf("cilium-agent of %s exited (%s):\n%s", c.node.name, how, c.Log(40))
	}
	if err := c.agent.Signal(sig); err != nil {
		c.t.Fatalf("signal cilium-agent of %s: %v", c.node.name, err)
	}
}
