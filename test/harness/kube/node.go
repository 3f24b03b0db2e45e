//go:build integration

package kube

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/runtimes"
)

// The node's fixed places: test/node's kustomize overlay names them, as an
// operator's overlay names a real node's folders.
const (
	nodeRoot    = "/run/nr-node"
	NodeName    = "nr-node"
	NodeAPIPort = 16443
	nodeSubnet  = "10.200.90.0/28" // 13 pod addresses: the pool scenario fills it
	NodeBridge  = "nrnode0"
	nodeCgroup  = "nr-node-kubelet"
	// The overlay runs a condition type other than the default, set once
	// in netready-settings: the sidecar's flag and the policies follow it.
	NodeConditionType = "example.com/node-network-ready"
)

// K8sNode is a single-node Kubernetes: etcd, kube-apiserver, containerd,
// kubelet, kube-controller-manager and kube-scheduler, all built from the
// module proxy, with its own PKI, folders, bridge and cgroup root.
type K8sNode struct {
	T       testing.TB
	Bins    string // etcd and Kubernetes binaries
	dir     string // everything else of this run
	CRI     *runtimes.CRI
	Admin   *kubernetes.Clientset
	ConfDir string // the runtime's CNI config folder
	BinDir  string // the runtime's CNI plugin folder
	procs   map[string]*harness.Daemon
}

// StartNode brings the node up and registers its teardown, which leaves the
// host as it was even when the test fails half-way.
func StartNode(t testing.TB) *K8sNode {
	t.Helper()
	bins := os.Getenv("NETREADY_K8S_BIN")
	for _, b := range []string{"etcd", "kube-apiserver", "kubelet", "kube-controller-manager", "kube-scheduler", "kubectl"} {
		if _, err := os.Stat(filepath.Join(bins, b)); err != nil {
			t.Fatalf("NETREADY_K8S_BIN: %v; run `make test`", err)
		}
	}
	if _, err := os.Stat(nodeRoot); err == nil {
		t.Fatalf("%s exists: a previous node test did not clean up; scripts/preserve-host.sh removes it", nodeRoot)
	}
	n := &K8sNode{T: t, Bins: bins, dir: nodeRoot, procs: map[string]*harness.Daemon{},
		ConfDir: filepath.Join(nodeRoot, "cni", "net.d"), BinDir: filepath.Join(nodeRoot, "cni", "bin")}
	for _, d := range []string{"pki", "logs", "etcd", "kubelet", "pod-logs", "cni/net.d", "cni/bin", "ipam", "state", "agent", "calico"} {
		if err := os.MkdirAll(filepath.Join(nodeRoot, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(n.removeRoot)
	n.saveHostState()
	n.writePKI()

	etcdClient, etcdPeer := harness.FreePort(t), harness.FreePort(t)
	n.start("etcd", filepath.Join(bins, "etcd"), "--name", "nr", "--data-dir", n.Path("etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-cluster", fmt.Sprintf("nr=http://127.0.0.1:%d", etcdPeer),
		"--listen-metrics-urls", "", "--log-level", "warn")
	n.start("kube-apiserver", filepath.Join(bins, "kube-apiserver"),
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(NodeAPIPort),
		"--tls-cert-file", n.Path("pki/apiserver.crt"), "--tls-private-key-file", n.Path("pki/apiserver.key"),
		"--token-auth-file", n.Path("pki/tokens.csv"), "--authorization-mode", "RBAC",
		"--service-account-key-file", n.Path("pki/sa.pub"), "--service-account-signing-key-file", n.Path("pki/sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.200.91.0/24", "--endpoint-reconciler-type", "none",
		"--enable-priority-and-fairness=false", "--allow-privileged=true")
	cfg := &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", NodeAPIPort), BearerToken: "nr-node-admin",
		TLSClientConfig: rest.TLSClientConfig{CAFile: n.Path("pki/ca.crt")}}
	n.Admin = kubernetes.NewForConfigOrDie(cfg)
	// Two minutes: in CI, on 2 cores, one ran out once, its cause unseen.
	n.WaitForNoError("kube-apiserver ready", 2*time.Minute, n.apiServerAnswers)

	guardNodeForwarding(t)
	n.makeCgroups()
	n.writeCNIConfig()
	n.CRI = runtimes.StartCRIWith(t, n.ConfDir, func(cfg string) string {
		// Pod netns in /var/run/netns, where deploy/ mounts them for the
		// sidecar's re-checks, as on a real node.
		return strings.Replace(cfg, "netns_mounts_under_state_dir = true", "netns_mounts_under_state_dir = false", 1)
	}, n.BinDir)
	n.startKubelet()
	n.start("kube-controller-manager", filepath.Join(bins, "kube-controller-manager"), "--kubeconfig", n.Path("pki/kcm.kubeconfig"),
		"--leader-elect=false", "--use-service-account-credentials=false",
		"--service-account-private-key-file", n.Path("pki/sa.key"), "--root-ca-file", n.Path("pki/ca.crt"),
		"--bind-address", "127.0.0.1", "--secure-port", "0", "--controllers", "*", "--flex-volume-plugin-dir", n.Path("kcm-flex"))
	n.start("kube-scheduler", filepath.Join(bins, "kube-scheduler"), "--kubeconfig", n.Path("pki/sched.kubeconfig"),
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "0")
	// Registered last, so it runs first: while kubelet still tears pods down.
	t.Cleanup(n.stopWorkloads)
	n.WaitFor("node Ready", 2*time.Minute, func() bool { ok, _ := n.Ready(); return ok })
	n.WaitFor("default ServiceAccounts", time.Minute, func() bool {
		_, err := n.Admin.CoreV1().ServiceAccounts("default").Get(context.Background(), "default", metav1.GetOptions{})
		return err == nil
	})
	return n
}

// Path is p inside the node's folder.
func (n *K8sNode) Path(p string) string { return filepath.Join(n.dir, p) }

// start runs a daemon in its own process group and stops it at cleanup,
// in reverse order of starting.
func (n *K8sNode) start(name, bin string, args ...string) {
	n.T.Helper()
	logf, err := os.OpenFile(n.Path("logs/"+name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.T.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d, err := harness.StartDaemon(cmd)
	if err != nil {
		n.T.Fatal(err)
	}
	n.procs[name] = d
	n.T.Cleanup(func() {
		d.Stop(syscall.SIGTERM, 20*time.Second)
		logf.Close()
		if n.T.Failed() {
			data, _ := os.ReadFile(logf.Name())
			n.T.Logf("%s log:\n%s", name, harness.Tail(string(data), 30))
		}
	})
}

// WaitFor waits up to limit for ok, failing at once with its log if one of
// the node's daemons died.
func (n *K8sNode) WaitFor(what string, limit time.Duration, ok func() bool) {
	n.T.Helper()
	n.WaitForNoError(what, limit, func() error {
		if ok() {
			return nil
		}
		return errors.New("not yet")
	})
}

// WaitForNoError is WaitFor for a probe that says why it failed: the last
// reason is in the failure.
func (n *K8sNode) WaitForNoError(what string, limit time.Duration, probe func() error) {
	n.T.Helper()
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		err := probe()
		if err == nil {
			return
		}
		for name, d := range n.procs {
			if dead, how := d.Dead(); dead {
				data, _ := os.ReadFile(n.Path("logs/" + name + ".log"))
				n.T.Fatalf("%s: %s died (%s):\n%s", what, name, how, harness.Tail(string(data), 30))
			}
		}
		if time.Since(start) > limit {
			n.T.Fatalf("%s: not within %s (last: %v)", what, limit, err)
		}
	}
}

// Ready returns the Node's Ready condition and its message.
func (n *K8sNode) Ready() (bool, string) {
	node, err := n.Admin.CoreV1().Nodes().Get(context.Background(), NodeName, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, c.Message
		}
	}
	return false, "no Ready condition"
}

// writePKI makes a CA, the API server's serving certificate (for
// 127.0.0.1), the ServiceAccount key pair, static tokens and kubeconfigs.
func (n *K8sNode) writePKI() {
	t := n.T
	caKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nr-node-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		DNSNames:    []string{"localhost", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.200.91.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	saKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	saPub, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	files := map[string][]byte{
		"ca.crt":        pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"apiserver.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		"apiserver.key": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(srvKey)}),
		"sa.key":        pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		"sa.pub":        pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
		"tokens.csv": []byte("nr-node-admin,admin,admin,system:masters\n" +
			"nr-node-kubelet,system:node:" + NodeName + ",kubelet,\"system:nodes,system:masters\"\n" +
			"nr-node-kcm,system:kube-controller-manager,kcm,system:masters\n" +
			"nr-node-sched,system:kube-scheduler,sched,system:masters\n"),
	}
	for user, token := range map[string]string{"admin": "nr-node-admin", "kubelet": "nr-node-kubelet", "kcm": "nr-node-kcm", "sched": "nr-node-sched"} {
		files[user+".kubeconfig"] = []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: nr, cluster: {server: "https://127.0.0.1:%d", certificate-authority: %q}}]
users: [{name: u, user: {token: %s}}]
contexts: [{name: nr, context: {cluster: nr, user: u}}]
current-context: nr
`, NodeAPIPort, n.Path("pki/ca.crt"), token))
	}
	for name, data := range files {
		if err := os.WriteFile(n.Path("pki/"+name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// guardNodeForwarding: pod traffic may only stay in the pod subnet on the
// node's bridge (TESTBED network safety); bridge's isGateway turns
// forwarding on, which Main restores.
func guardNodeForwarding(t testing.TB) {
	rules := [][]string{
		{"FORWARD", "-s", nodeSubnet, "!", "-d", nodeSubnet, "-j", "DROP", "-m", "comment", "--comment", "nr-node-guard"},
		{"FORWARD", "-s", nodeSubnet, "!", "-o", NodeBridge, "-j", "DROP", "-m", "comment", "--comment", "nr-node-guard"},
	}
	for _, r := range rules {
		harness.MustRun(t, "iptables", append([]string{"-w", "5", "-I"}, r...)...)
	}
	t.Cleanup(func() {
		for _, r := range rules {
			exec.Command("iptables", append([]string{"-w", "5", "-D"}, r...)...).Run()
		}
	})
}

// makeCgroups creates kubelet's cgroup root in every v1 hierarchy.
func (n *K8sNode) makeCgroups() {
	all, _ := filepath.Glob("/sys/fs/cgroup/*")
	var hs []string
	for _, h := range all {
		// Some hierarchies are links to a combined one (cpu -> cpu,cpuacct).
		if info, err := os.Stat(h); err == nil && info.IsDir() && filepath.Base(h) != "unified" {
			hs = append(hs, h)
			if err := os.MkdirAll(filepath.Join(h, nodeCgroup), 0o755); err != nil {
				n.T.Fatalf("cgroup %s: %v", h, err)
			}
		}
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		data, _ := os.ReadFile("/sys/fs/cgroup/cpuset/" + f)
		os.WriteFile(filepath.Join("/sys/fs/cgroup/cpuset", nodeCgroup, f), data, 0o644)
	}
	// kubelet and runc also use the unified hierarchy when it is mounted.
	cleanup := append(hs, "/sys/fs/cgroup/unified")
	n.T.Cleanup(func() {
		// Deepest first; only empty cgroups go, once their tasks are gone.
		for _, h := range cleanup {
			root := filepath.Join(h, nodeCgroup)
			var dirs []string
			filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				for try := 0; try < 50 && os.Remove(dirs[i]) != nil; try++ {
					time.Sleep(100 * time.Millisecond)
				}
			}
			if _, err := os.Stat(root); err == nil {
				n.T.Errorf("cannot remove cgroup %s", root)
			}
		}
	})
}

// writeCNIConfig: the node's network plugin, bridge + host-local in
// 10.200.90.0/28 with no default route for pods, written atomically.
func (n *K8sNode) writeCNIConfig() {
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		data, err := os.ReadFile(filepath.Join(harness.CNIBinDir, p))
		if err != nil {
			n.T.Fatal(err)
		}
		os.WriteFile(filepath.Join(n.BinDir, p), data, 0o755)
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.1.0",
  "name": "nr-node",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}}
  ]
}
`, NodeBridge, nodeSubnet, n.Path("ipam"))
	tmp := filepath.Join(n.ConfDir, ".10-nr-node.tmp")
	os.WriteFile(tmp, []byte(conf), 0o644)
	if err := os.Rename(tmp, filepath.Join(n.ConfDir, "10-nr-node.conflist")); err != nil {
		n.T.Fatal(err)
	}
	n.T.Cleanup(func() {
		exec.Command("ip", "link", "del", NodeBridge).Run()
	})
}

// startKubelet runs kubelet with the settings this host needs (cgroup v1,
// no CAP_SYS_RESOURCE, no swap accounting, kubelet's own paths under the
// node's folder).
func (n *K8sNode) startKubelet() {
	nodeIP := hostIP(n.T)
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
cgroupsPerQOS: true
failSwapOn: false
makeIPTablesUtilChains: false
oomScoreAdj: 0
containerRuntimeEndpoint: unix://%s
imageServiceEndpoint: unix://%s
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
staticPodPath: ""
volumePluginDir: %s
podLogsDir: %s
resolvConf: ""
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
`, nodeCgroup, n.CRI.Socket(), n.CRI.Socket(), n.Path("kubelet/volume-plugins"), n.Path("pod-logs"))
	os.WriteFile(n.Path("kubelet-config.yaml"), []byte(cfg), 0o644)
	n.start("kubelet", filepath.Join(n.Bins, "kubelet"), "--config", n.Path("kubelet-config.yaml"),
		"--kubeconfig", n.Path("pki/kubelet.kubeconfig"), "--root-dir", n.Path("kubelet"), "--cert-dir", n.Path("kubelet/pki"),
		"--hostname-override", NodeName, "--node-ip", nodeIP)
}

// hostIP is the host's own IPv4 address, so kubelet never resolves its name.
func hostIP(t testing.TB) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !strings.HasPrefix(ipn.IP.String(), "10.200.") {
			return ipn.IP.String()
		}
	}
	t.Fatal("no host IPv4 address for --node-ip")
	return ""
}

// stopWorkloads deletes controllers, then pods, through the API while
// kubelet runs, so that kubelet tears the sandboxes down (CNI DEL).
func (n *K8sNode) stopWorkloads() {
	ctx := context.Background()
	zero := int64(0)
	nss, _ := n.Admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	for _, ns := range nss.Items {
		n.Admin.AppsV1().DaemonSets(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		n.Admin.AppsV1().Deployments(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}
	for _, ns := range nss.Items {
		n.Admin.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	}
	for start := time.Now(); time.Since(start) < 60*time.Second; time.Sleep(200 * time.Millisecond) {
		pods, err := n.Admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) == 0 {
			return
		}
	}
	n.T.Errorf("pods still exist 60 s after deletion")
}

// sysctls kubelet or bridge may change; restored at cleanup.
var nodeSysctls = []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"}

// saveHostState records what kubelet changes outside the node's folder and
// restores it at cleanup: sysctls, and the folders it hard-codes.
func (n *K8sNode) saveHostState() {
	saved := map[string]string{}
	for _, s := range nodeSysctls {
		if out, err := exec.Command("sysctl", "-n", s).Output(); err == nil {
			saved[s] = strings.TrimSpace(string(out))
		}
	}
	hadLib := exists("/var/lib/kubelet")
	hadLogs := exists("/var/log/containers")
	n.T.Cleanup(func() {
		for s, v := range saved {
			if out, _ := exec.Command("sysctl", "-n", s).Output(); strings.TrimSpace(string(out)) != v {
				exec.Command("sysctl", "-qw", s+"="+v).Run()
			}
		}
		if !hadLib {
			os.Remove("/var/lib/kubelet/device-plugins/kubelet.sock")
			os.Remove("/var/lib/kubelet/device-plugins")
			os.Remove("/var/lib/kubelet/plugins_registry")
			os.Remove("/var/lib/kubelet/plugins")
			if err := os.Remove("/var/lib/kubelet"); err != nil && exists("/var/lib/kubelet") {
				n.T.Errorf("kubelet left /var/lib/kubelet: %v", err)
			}
		}
		if !hadLogs {
			os.RemoveAll("/var/log/containers")
		}
	})
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// removeRoot unmounts what is left under the node's folder (kubelet's
// bind of its root dir, projected-token tmpfs) and removes it.
func (n *K8sNode) removeRoot() {
	for _, m := range harness.MountsUnder(nodeRoot) {
		if err := syscall.Unmount(m, 0); err != nil {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	if err := syscall.Unmount(nodeRoot, 0); err == nil {
		n.T.Logf("unmounted %s", nodeRoot)
	}
	if err := os.RemoveAll(nodeRoot); err != nil {
		n.T.Errorf("remove %s: %v", nodeRoot, err)
	}
}
