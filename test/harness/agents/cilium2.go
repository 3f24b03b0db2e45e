//go:build integration

package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// The two Cilium nodes' addresses: the underlay veth between their
// netns, and each node's podCIDR, all within the native-routing CIDR.
const (
	ciliumNativeCIDR = "10.200.80.0/22"
	ciliumUnderlayA  = "10.200.80.1"
	ciliumUnderlayB  = "10.200.80.2"
	ciliumPodsA      = "10.200.81.0/24"
	ciliumPodsB      = "10.200.82.0/24"
	// CiliumNodeA and CiliumNodeB are the two Nodes.
	CiliumNodeA = "nr-cil-a"
	CiliumNodeB = "nr-cil-b"
)

// CiliumCrossNodeBed is the race of issue #52 on two real cilium-agents,
// one per node netns, in native routing (no tunnel: the server's node
// tells a packet's source identity only from its own ipcache, filled from
// the CiliumEndpoints it watches): a server pod on node B behind a
// NetworkPolicy that admits only app=web on port 8080, and client pods
// on node A through cilium-cni and, when asked, netready.
type CiliumCrossNodeBed struct {
	t        testing.TB
	API      *kube.APIServer
	A, B     *RealCilium
	State    string // netready's stateDir
	Log      string // netready's logFile
	ServerIP string
	cniA     *libcni.CNIConfig
}

// StartCiliumCrossNodeBed starts the API server (with apiArgs), both
// agents and the server pod on B, and returns once each agent knows the
// other's node.
func StartCiliumCrossNodeBed(t testing.TB, apiArgs ...string) *CiliumCrossNodeBed {
	t.Helper()
	a := kube.StartAPIServer(t, apiArgs...)
	nsA, nsB := "nrcila-"+harness.RandomHex(3), "nrcilb-"+harness.RandomHex(3)
	for _, n := range []string{nsA, nsB} {
		harness.MustRun(t, "ip", "netns", "add", n)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", n).Run() })
		harness.MustRun(t, "ip", "netns", "exec", n, "ip", "link", "set", "lo", "up")
	}
	// The underlay: one veth straight from A's netns to B's; nothing
	// of it is on the host, and neither node has a route out.
	harness.MustRun(t, "ip", "link", "add", "nrcilul", "netns", nsA, "type", "veth", "peer", "name", "nrcilul", "netns", nsB)
	for n, ip := range map[string]string{nsA: ciliumUnderlayA, nsB: ciliumUnderlayB} {
		harness.MustRun(t, "ip", "netns", "exec", n, "ip", "addr", "add", ip+"/30", "dev", "nrcilul")
		harness.MustRun(t, "ip", "netns", "exec", n, "ip", "link", "set", "nrcilul", "up")
	}
	ApplyCiliumCRDs(t, a)
	spec := func(name, podCIDR, ip, netns string) ciliumNode {
		return ciliumNode{name: name, podCIDR: podCIDR, ip: ip, device: "nrcilul", netns: netns, native: true, nativeCIDR: ciliumNativeCIDR}
	}
	b := &CiliumCrossNodeBed{t: t, API: a,
		A: launchCilium(t, a, spec(CiliumNodeA, ciliumPodsA, ciliumUnderlayA, nsA)),
		B: launchCilium(t, a, spec(CiliumNodeB, ciliumPodsB, ciliumUnderlayB, nsB))}
	dir := t.TempDir()
	b.State, b.Log = filepath.Join(dir, "state"), filepath.Join(dir, "netready.log")
	b.cniA = b.A.CNI(t, filepath.Join(dir, "a"))
	for _, c := range []*RealCilium{b.A, b.B} {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			err := c.knowsNodes(2)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v after a minute:\n%s", err, c.Log(40))
			}
		}
	}

	AllowOnlyWeb(t, a)
	cniB := b.B.CNI(t, filepath.Join(dir, "b"))
	srv, ip, err := b.B.AddPod(t, cniB, b.Chain(nil), "server", "server")
	if err != nil {
		t.Fatalf("ADD server on %s: %v\n%s", CiliumNodeB, err, b.B.Log(40))
	}
	b.ServerIP = ip
	cnitest.ServeTCP(t, srv.NetNS, 8080)
	return b
}

// AllowOnlyWeb creates the NetworkPolicy default/server: pods labelled
// app=server admit TCP port 8080 from pods labelled app=web, and nothing
// else.
func AllowOnlyWeb(t testing.TB, a *kube.APIServer) {
	t.Helper()
	port := intstr.FromInt32(8080)
	tcp := corev1.ProtocolTCP
	policy := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "server"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}}}}}
	if _, err := a.Admin.NetworkingV1().NetworkPolicies("default").Create(context.Background(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Chain is the conflist on node A: cilium-cni, then netready's entry when
// it is not nil.
func (b *CiliumCrossNodeBed) Chain(netready map[string]any) *libcni.NetworkConfigList {
	b.t.Helper()
	plugins := []any{map[string]any{"type": "cilium-cni"}}
	if netready != nil {
		plugins = append(plugins, netready)
	}
	data, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "cilium", "plugins": plugins})
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		b.t.Fatal(err)
	}
	return list
}

// Add creates a client pod labelled app on node A and runs ADD for it,
// and DEL at cleanup; it returns the pod's IP and how long ADD took.
func (b *CiliumCrossNodeBed) Add(list *libcni.NetworkConfigList, name, app string) (*libcni.RuntimeConf, string, time.Duration, error) {
	start := time.Now()
	rt, ip, err := b.A.AddPod(b.t, b.cniA, list, name, app)
	return rt, ip, time.Since(start), err
}

// AddGated is Add for a pod whose readiness waits for netready's
// condition, as the chart's mutating policy gates it.
func (b *CiliumCrossNodeBed) AddGated(list *libcni.NetworkConfigList, name, app string) (*libcni.RuntimeConf, string, time.Duration, error) {
	start := time.Now()
	rt, ip, err := b.A.AddPod(b.t, b.cniA, list, name, app, publish.DefaultConditionType)
	return rt, ip, time.Since(start), err
}

// CiliumEndpoint is the CiliumEndpoint default/name as the API server
// has it: its CNI attachment ("<container>:<ifname>"), endpoint id and
// identity; ok is false while there is none.
func (b *CiliumCrossNodeBed) CiliumEndpoint(name string) (attachment string, id, identity int64, ok bool) {
	b.t.Helper()
	data, err := b.API.Admin.CoreV1().RESTClient().Get().AbsPath("/apis/cilium.io/v2/namespaces/default/ciliumendpoints", name).DoRaw(context.Background())
	if err != nil {
		return "", 0, 0, false
	}
	var cep struct {
		Status struct {
			ID                  int64 `json:"id"`
			ExternalIdentifiers struct {
				CNIAttachmentID string `json:"cni-attachment-id"`
			} `json:"external-identifiers"`
			Identity struct {
				ID int64 `json:"id"`
			} `json:"identity"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &cep); err != nil {
		b.t.Fatalf("CiliumEndpoint %s: %v: %s", name, err, data)
	}
	return cep.Status.ExternalIdentifiers.CNIAttachmentID, cep.Status.ID, cep.Status.Identity.ID, true
}

// Marker is the marker of rt's ADD on node A; the chain's network is
// "cilium".
func (b *CiliumCrossNodeBed) Marker(rt *libcni.RuntimeConf) *marker.Marker {
	b.t.Helper()
	m, err := marker.Store{Dir: b.State}.Read(marker.Key{Network: "cilium", ContainerID: rt.ContainerID, IfName: rt.IfName})
	if err != nil {
		b.t.Fatalf("marker of %s: %v", rt.ContainerID, err)
	}
	return m
}

// Connect is a client's first action: one TCP connection to the server.
func (b *CiliumCrossNodeBed) Connect(rt *libcni.RuntimeConf) error {
	return cnitest.FirstConnect(rt.NetNS, b.ServerIP+":8080")
}

// Frozen runs f with B's agent stopped, and continues it after.
func (b *CiliumCrossNodeBed) Frozen(f func()) {
	b.B.Freeze(true)
	defer b.B.Freeze(false)
	f()
}

// CNI is a libcni config whose cilium-cni runs in this agent's node netns
// (its host-side veth goes there) against its socket; dir holds the
// plugins and libcni's cache.
func (c *RealCilium) CNI(t testing.TB, dir string) *libcni.CNIConfig {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(bin, "cilium-cni"), []byte(fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s env CILIUM_SOCK=%s %s \"$@\"\n",
		c.Netns, c.Sock, filepath.Join(c.Bins, "cilium-cni"))), 0o755)
	data, err := os.ReadFile(filepath.Join(harness.BinDir, "netready"))
	if err == nil {
		err = os.WriteFile(filepath.Join(bin, "netready"), data, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	return libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"), nil)
}

// AddPod creates the Pod default/name labelled app=app, with a readiness
// gate per condition type in gates, on this agent's node and runs list's
// ADD for it, DEL at cleanup; it returns the pod's IP.
func (c *RealCilium) AddPod(t testing.TB, cni *libcni.CNIConfig, list *libcni.NetworkConfigList, name, app string, gates ...string) (*libcni.RuntimeConf, string, error) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{NodeName: c.node.name, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	for _, g := range gates {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: corev1.PodConditionType(g)})
	}
	created, err := c.api.Admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rt := &libcni.RuntimeConf{ContainerID: "cil-" + name + "-" + harness.RandomHex(3), NetNS: cnitest.NewNS(t).Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}, {"K8S_POD_UID", string(created.UID)}}}
	t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
	res, err := cni.AddNetworkList(ctx, list, rt)
	if err != nil {
		return rt, "", err
	}
	data, _ := json.Marshal(res)
	var r struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	json.Unmarshal(data, &r)
	if len(r.IPs) == 0 {
		return rt, "", fmt.Errorf("ADD %s returned no IP: %s", name, data)
	}
	addr, _, err := net.ParseCIDR(r.IPs[0].Address)
	if err != nil {
		return rt, "", err
	}
	return rt, addr.String(), nil
}

// Identity is the identity this agent's ipcache holds for ip, 0 when it
// holds none.
func (c *RealCilium) Identity(ip string) (int64, error) {
	var entries []struct {
		Identity int64 `json:"identity"`
	}
	if err := c.get("/v1/ip?cidr="+url.QueryEscape(ip+"/32"), &entries); err != nil {
		if strings.Contains(err.Error(), "404") {
			return 0, nil
		}
		return 0, err
	}
	if len(entries) == 0 {
		return 0, nil
	}
	return entries[0].Identity, nil
}

// knowsNodes is nil once the agent lists n nodes.
func (c *RealCilium) knowsNodes(n int) error {
	var cluster struct {
		NodesAdded []struct {
			Name string `json:"name"`
		} `json:"nodes-added"`
	}
	if err := c.get("/v1/cluster/nodes", &cluster); err != nil {
		return err
	}
	if len(cluster.NodesAdded) < n {
		return fmt.Errorf("cilium-agent of %s knows %d nodes, want %d", c.node.name, len(cluster.NodesAdded), n)
	}
	return nil
}

// get is one GET of the agent's REST API, decoded into v.
func (c *RealCilium) get(path string, v any) error {
	client := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", c.Sock)
	}}}
	resp, err := client.Get("http://agent" + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
