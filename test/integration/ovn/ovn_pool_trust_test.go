//go:build integration

package ovn

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool/ovn"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// TestOVNPoolTenantAnnotationNeverTaints, on a real kube-apiserver with
// the RBAC of deploy/ and the real sidecar: a tenant who may only create
// and patch pods in its own namespace binds pods to an ovn-kubernetes node
// (spec.nodeName) and writes k8s.ovn.org/pod-networks itself: one pod
// claims every address of the node's /24 (10.244.9.3/24 … .254/24, 4.4 KB),
// one carries "not json", and it even sends status.podIPs with a create.
// None of it counts: the pool is 0 of 252 and can tell, and the node is
// not tainted; a crafted annotation patched onto a running pod changes
// nothing. Then pods whose addresses kubelet posts (pods/status, as the
// node) fill the subnet: 251 of 252 leave it untainted, the 252nd taints
// it.
func TestOVNPoolTenantAnnotationNeverTaints(t *testing.T) {
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	const node, network, tenantNS = "node-ovn-trust", "ovn-kubernetes", "tenant"
	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Annotations: map[string]string{ovn.NodeSubnets: `{"default":["10.244.9.0/24"]}`}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tenant := tenantClient(t, a, tenantNS)
	admin, kubelet := fastClient(a, "", nil), kubeletClient(t, a, node)

	var claims []string
	for i := 3; i <= 254; i++ {
		claims = append(claims, fmt.Sprintf(`"10.244.9.%d/24"`, i))
	}
	crafted := `{"default":{"ip_addresses":[` + strings.Join(claims, ",") + `],"mac_address":"0a:58:0a:f4:09:03","gateway_ips":["10.244.9.1"],"role":"primary"}}`
	tenantPod := func(name, networks string) {
		t.Helper()
		p := kube.PlainPod(tenantNS, name, node)
		p.Annotations = map[string]string{ovn.PodNetworks: networks}
		// What the tenant sends as status: the API server drops it on create.
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.9.3", PodIPs: []corev1.PodIP{{IP: "10.244.9.3"}}}
		out, err := tenant.CoreV1().Pods(tenantNS).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the tenant creates pod %s bound to %s: %v", name, node, err)
		}
		if len(out.Status.PodIPs) != 0 || out.Status.Phase == corev1.PodRunning {
			t.Fatalf("the API server kept the status a tenant sent on create: %+v", out.Status)
		}
	}
	if len(crafted) < 4000 {
		t.Fatalf("the crafted annotation is %d bytes, want the issue's 4.4 KB", len(crafted))
	}
	tenantPod("crafted", crafted)

	listen, logs := ovnPoolSidecar(t, a, node, network)
	const metric = `netready_pool_addresses{network="ovn-kubernetes",source="ovn-kubernetes",state=`
	harness.Within(t, "the pool counted", 20*time.Second, func() bool {
		return strings.Contains(kube.MetricsText(t, listen), metric+`"capacity"} 252`)
	})
	if m := kube.MetricsText(t, listen); !strings.Contains(m, metric+`"used"} 0`) {
		tainted := false
		for start := time.Now(); !tainted && time.Since(start) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
			tainted = nodewriter.Has(a.Node(t, node))
		}
		t.Errorf("a tenant's annotation counted (tainted: %v):\n%s", tainted, harness.GrepLines(m, "netready_pool"))
	} else if n := a.Node(t, node); nodewriter.Has(n) {
		t.Errorf("a tenant's annotation tainted the node: %+v\n%s", nodewriter.Current(n), logs.String())
	}

	// One pod's garbled annotation blinds nothing; a tenant's pod that
	// kubelet runs holds one address, whatever the tenant then writes in
	// its annotation.
	tenantPod("garbled", "not json")
	runPods(t, tenant, kubelet, tenantNS, node, "running", []string{"10.244.9.3"})
	if _, err := tenant.CoreV1().Pods(tenantNS).Patch(ctx, "running-0", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"k8s.ovn.org/pod-networks":`+jsonString(crafted)+`}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the tenant patches its running pod's annotation: %v", err)
	}
	harness.Within(t, "one address in use", 20*time.Second, func() bool {
		return strings.Contains(kube.MetricsText(t, listen), metric+`"used"} 1`)
	})
	if m := kube.MetricsText(t, listen); !strings.Contains(m, `netready_pool_unknown{network="ovn-kubernetes",source="ovn-kubernetes"} 0`) {
		t.Errorf("one pod's garbled annotation made the pool can't tell:\n%s", harness.GrepLines(m, "netready_pool"))
	}
	if n := a.Node(t, node); nodewriter.Has(n) {
		t.Fatalf("tainted at 1 of 252: %+v\n%s", nodewriter.Current(n), logs.String())
	}

	t.Run("pods kubelet ran fill the subnet: the 252nd address taints the node", func(t *testing.T) {
		tw := kube.WatchTaint(t, a.Admin, node)
		var ips []string
		for i := 4; i <= 253; i++ {
			ips = append(ips, fmt.Sprintf("10.244.9.%d", i))
		}
		runPods(t, admin, kubelet, "default", node, "fill", ips)
		harness.Within(t, "251 of 252 in use", 30*time.Second, func() bool {
			return strings.Contains(kube.MetricsText(t, listen), `netready_pool_addresses{network="ovn-kubernetes",source="ovn-kubernetes",state="used"} 251`)
		})
		if added, _ := tw.FirstTimes(); !added.IsZero() || nodewriter.Has(a.Node(t, node)) {
			t.Fatalf("tainted at 251 of 252 with minFree 1\n%s", logs.String())
		}
		runPods(t, admin, kubelet, "default", node, "last", []string{"10.244.9.254"})
		harness.Within(t, "the taint", 20*time.Second, func() bool { added, _ := tw.FirstTimes(); return !added.IsZero() })
		c := nodewriter.Current(a.Node(t, node))
		if c == nil || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "252 of 252 addresses in use") {
			t.Errorf("condition = %+v, want True at 252 of 252\n%s", c, logs.String())
		}
	})
}

// ovnPoolSidecar runs the real sidecar for node on an ovn-k8s-cni-overlay
// chain whose netready entry counts the pool ("ipam": "auto") and taints.
func ovnPoolSidecar(t *testing.T, a *kube.APIServer, node, network string) (string, *harness.SyncBuffer) {
	t.Helper()
	state, confDir := t.TempDir(), t.TempDir()
	conf, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": network, "plugins": []any{
		map[string]any{"type": "ovn-k8s-cni-overlay", "ipam": map[string]any{}, "dns": map[string]any{}},
		map[string]any{"type": "netready", "stateDir": state, "status": map[string]any{"ipam": "auto", "poolAction": "taint"}}}})
	if err := os.WriteFile(filepath.Join(confDir, "10-ovn-kubernetes.conflist"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	listen, logs, _ := kube.StartSidecarProc(t, a.AgentKubeconfig, t.TempDir(), node, "--cni-conf-dir", confDir)
	return listen, logs
}

// tenantClient is a user who may create, read and patch pods in ns and
// nothing else, as a cluster's tenants may.
func tenantClient(t *testing.T, a *kube.APIServer, ns string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	if _, err := a.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager: pods need their service account to exist.
	if _, err := a.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "patch", "update"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "tenant"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return fastClient(a, "tenant", []string{"system:authenticated"})
}

// fastClient presents the admin's token, as user (with groups) when user
// is set, without client-side rate limits: the tests post hundreds of pods.
func fastClient(a *kube.APIServer, user string, groups []string) kubernetes.Interface {
	cfg := a.Config(kube.AdminToken)
	cfg.QPS, cfg.Burst = -1, 0
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

// kubeletClient acts as node's kubelet, with the rights of the system:node
// ClusterRole (kube.APIServer.Kubelet).
func kubeletClient(t *testing.T, a *kube.APIServer, node string) kubernetes.Interface {
	t.Helper()
	a.Kubelet(t, node) // binds the system:node ClusterRole to system:nodes
	return fastClient(a, "system:node:"+node, []string{"system:nodes", "system:authenticated"})
}

// runPods creates, as creator, a pod in ns bound to node for each address,
// and posts it Running with that address as its kubelet would
// (pods/status).
func runPods(t *testing.T, creator, kubelet kubernetes.Interface, ns, node, prefix string, ips []string) {
	t.Helper()
	ctx := context.Background()
	work := make(chan int)
	errs := make(chan error, len(ips))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				p, err := creator.CoreV1().Pods(ns).Create(ctx, kube.PlainPod(ns, fmt.Sprintf("%s-%d", prefix, i), node), metav1.CreateOptions{})
				if err == nil {
					p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ips[i], PodIPs: []corev1.PodIP{{IP: ips[i]}},
						StartTime: &metav1.Time{Time: time.Now()}}
					_, err = kubelet.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				}
				if err != nil {
					errs <- fmt.Errorf("run pod %s/%s-%d with %s: %w", ns, prefix, i, ips[i], err)
				}
			}
		})
	}
	for i := range ips {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
