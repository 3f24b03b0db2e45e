//go:build integration

package integration

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
)

// realCilium is a real cilium-agent (built from the module proxy by
// scripts/build-cilium.sh) in a netns of its own, against the test's
// kube-apiserver with Cilium's CRDs: kubernetes IPAM from the Node's
// podCIDR, VXLAN tunnel mode, CRD identities, no kube-proxy replacement,
// no L7 proxy, Hubble or health checks. Its state, socket, bpffs and
// cgroup2 are under the test's folder; nothing of the host's is used.
type realCilium struct {
	t      testing.TB
	dir    string
	netns  string
	sock   string
	bins   string
	node   string
	cmd    *exec.Cmd
	logs   *os.File
	apiURL string
	once   sync.Once
}

const ciliumNode = "nr-cil"

func startRealCilium(t testing.TB, a *apiServer, podCIDR string) *realCilium {
	t.Helper()
	bins := os.Getenv("NETREADY_CILIUM_BIN")
	if bins == "" {
		t.Fatal("NETREADY_CILIUM_BIN must name the cilium-agent build (scripts/build-cilium.sh); run `make test`")
	}
	dir, err := os.MkdirTemp("", "nr-cil-")
	if err != nil {
		t.Fatal(err)
	}
	c := &realCilium{t: t, dir: dir, netns: "nrcil-" + randomHex(3), sock: filepath.Join(dir, "run", "cilium.sock"), bins: bins, node: ciliumNode}
	t.Cleanup(c.stop)
	for _, d := range []string{"run", "bpf", "cgroup", "lib"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	mustRun(t, "mount", "-t", "bpf", "bpf", filepath.Join(dir, "bpf"))
	mustRun(t, "mount", "-t", "cgroup2", "none", filepath.Join(dir, "cgroup"))
	mustRun(t, "cp", "-r", filepath.Join(bins, "bpf"), filepath.Join(dir, "lib", "bpf"))
	// clang and llc for the agent's BPF compilation, as Cilium's image
	// names them.
	tools := filepath.Join(dir, "tools")
	os.MkdirAll(tools, 0o755)
	os.Symlink("/usr/bin/clang-19", filepath.Join(tools, "clang"))
	os.Symlink("/usr/bin/llc-19", filepath.Join(tools, "llc"))

	mustRun(t, "ip", "netns", "add", c.netns)
	mustRun(t, "ip", "netns", "exec", c.netns, "ip", "link", "set", "lo", "up")
	// The node's NIC: a veth whose other end stays on the host.
	mustRun(t, "ip", "link", "add", "nrcilh", "type", "veth", "peer", "name", "nrcil0", "netns", c.netns)
	mustRun(t, "ip", "addr", "add", "10.200.97.1/30", "dev", "nrcilh")
	mustRun(t, "ip", "link", "set", "nrcilh", "up")
	mustRun(t, "ip", "netns", "exec", c.netns, "ip", "addr", "add", "10.200.97.2/30", "dev", "nrcil0")
	mustRun(t, "ip", "netns", "exec", c.netns, "ip", "link", "set", "nrcil0", "up")
	mustRun(t, "ip", "netns", "exec", c.netns, "ip", "route", "add", "default", "via", "10.200.97.1")

	// The API server listens on the host's loopback: forward a loopback
	// port in the agent's netns to it.
	c.apiURL = c.forward(a.port)
	kc := filepath.Join(dir, "kubeconfig")
	os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: %s}}]
contexts: [{name: test, context: {cluster: test, user: u}}]
current-context: test
`, c.apiURL, adminToken)), 0o600)

	crds, _ := filepath.Glob(filepath.Join(bins, "crds", "*.yaml"))
	for _, f := range crds {
		if out, err := a.kubectlRun("apply", "--server-side", "-f", f); err != nil {
			t.Fatalf("apply %s: %v\n%s", f, err, out)
		}
	}
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ciliumNode}, Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}
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
func (c *realCilium) forward(port int) string {
	var l net.Listener
	if err := ns.WithNetNSPath("/var/run/netns/"+c.netns, func(ns.NetNS) error {
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

func (c *realCilium) start(kubeconfig string) {
	args := []string{"netns", "exec", c.netns, filepath.Join(c.bins, "cilium-agent"),
		"--k8s-kubeconfig-path=" + kubeconfig,
		"--ipam=kubernetes", "--routing-mode=tunnel", "--tunnel-protocol=vxlan",
		"--devices=nrcil0", "--kube-proxy-replacement=false", "--enable-ipv6=false", "--enable-ipv4=true",
		"--enable-l7-proxy=false", "--enable-hubble=false", "--enable-health-checking=false", "--enable-endpoint-health-checking=false",
		"--identity-allocation-mode=crd", "--cluster-name=default",
		"--bpf-root=" + filepath.Join(c.dir, "bpf"), "--cgroup-root=" + filepath.Join(c.dir, "cgroup"),
		"--state-dir=" + filepath.Join(c.dir, "run"), "--socket-path=" + c.sock, "--lib-dir=" + filepath.Join(c.dir, "lib"),
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
			c.t.Fatalf("cilium-agent not healthy after %s:\n%s", time.Since(start).Round(time.Second), c.log(80))
		}
		time.Sleep(500 * time.Millisecond)
	}
	c.t.Logf("cilium-agent healthy %s after start", time.Since(start).Round(100*time.Millisecond))
}

// healthy asks the agent itself, through cilium-dbg.
func (c *realCilium) healthy() bool {
	out, err := exec.Command(filepath.Join(c.bins, "cilium-dbg"), "-H", "unix://"+c.sock, "status", "--brief").CombinedOutput()
	return err == nil && strings.Contains(string(out), "OK")
}

func (c *realCilium) log(lines int) string {
	data, _ := os.ReadFile(filepath.Join(c.dir, "agent.log"))
	return tail(string(data), lines)
}

// stop ends the agent and removes everything it had; a second call does
// nothing.
func (c *realCilium) stop() { c.once.Do(c.teardown) }

func (c *realCilium) teardown() {
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
		c.t.Logf("cilium-agent log:\n%s", c.log(60))
	}
	exec.Command("ip", "netns", "del", c.netns).Run()
	exec.Command("ip", "link", "del", "nrcilh").Run()
	for _, m := range []string{"bpf", "cgroup"} {
		exec.Command("umount", "-l", filepath.Join(c.dir, m)).Run()
	}
	os.RemoveAll(c.dir)
}
