//go:build integration

// Package kube runs Kubernetes around netready: a real kube-apiserver with
// etcd, a whole kubelet node, the sidecar against them, kubectl, Helm,
// kustomize and promtool, and the scoped deployment's credentials.
package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/test/harness"
)

// APIServer is a real etcd and kube-apiserver on loopback.
type APIServer struct {
	t             testing.TB
	dir, bins     string
	port          int
	Etcd, KubeAPI *exec.Cmd
	Admin         *kubernetes.Clientset
	// AgentKubeconfig authenticates as the sidecar's service account.
	AgentKubeconfig string
	AgentConfig     *rest.Config
	// kapiBin and kapiArgs restart the API server as it was.
	kapiBin  string
	kapiArgs []string
}

const (
	AdminToken = "netready-admin-token"
	agentToken = "netready-agent-token"
	AgentUser  = "system:serviceaccount:kube-system:netready-sidecar"
)

// StartAPIServer starts etcd and kube-apiserver; extraArgs go to
// kube-apiserver.
func StartAPIServer(t testing.TB, extraArgs ...string) *APIServer {
	t.Helper()
	return StartAPIServerOf(t, "kube-apiserver", extraArgs...)
}

// StartAPIServerOf is StartAPIServer with the kube-apiserver binary at
// kapi, a path under NETREADY_K8S_BIN (1.34/kube-apiserver for the older
// cluster).
func StartAPIServerOf(t testing.TB, kapi string, extraArgs ...string) *APIServer {
	t.Helper()
	bins := os.Getenv("NETREADY_K8S_BIN")
	if bins == "" {
		t.Fatal("NETREADY_K8S_BIN must name the kube-apiserver and etcd build; run `make test`")
	}
	a := &APIServer{t: t, dir: t.TempDir(), bins: bins, kapiBin: filepath.Join(bins, kapi), port: harness.FreePort(t)}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	os.WriteFile(filepath.Join(a.dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
	os.WriteFile(filepath.Join(a.dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
	tokens := AdminToken + ",admin,admin,system:masters\n" +
		agentToken + "," + AgentUser + ",agent,\"system:serviceaccounts,system:serviceaccounts:kube-system\"\n"
	os.WriteFile(filepath.Join(a.dir, "tokens.csv"), []byte(tokens), 0o600)

	etcdClient, etcdPeer := harness.FreePort(t), harness.FreePort(t)
	a.Etcd = a.start("etcd", filepath.Join(bins, "etcd"),
		"--name", "netready", "--data-dir", filepath.Join(a.dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-cluster", fmt.Sprintf("netready=http://127.0.0.1:%d", etcdPeer),
		"--listen-metrics-urls", "", "--log-level", "warn")
	a.kapiArgs = []string{
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(a.port), "--cert-dir", filepath.Join(a.dir, "certs"),
		"--token-auth-file", filepath.Join(a.dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-key-file", filepath.Join(a.dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(a.dir, "sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.200.252.0/24",
		"--endpoint-reconciler-type", "none",
		"--enable-priority-and-fairness=false",
		// deploy/'s DaemonSet has a privileged container.
		"--allow-privileged=true",
	}
	a.kapiArgs = append(a.kapiArgs, extraArgs...)
	a.StartAPI()
	cfg := a.Config(AdminToken)
	a.Admin = kubernetes.NewForConfigOrDie(cfg)
	a.AgentConfig = a.Config(agentToken)
	a.AgentKubeconfig = a.Kubeconfig("agent", agentToken)
	a.applyRBAC()
	// No controller-manager: pods need their service account to exist.
	ctx := context.Background()
	if _, err := a.Admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *APIServer) start(name, bin string, args ...string) *exec.Cmd {
	logf, _ := os.Create(filepath.Join(a.dir, name+".log"))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		}
		if a.t.Failed() {
			data, _ := os.ReadFile(filepath.Join(a.dir, name+".log"))
			a.t.Logf("%s log:\n%s", name, harness.Tail(string(data), 30))
		}
	})
	return cmd
}

// StartAPI starts kube-apiserver and waits until it is ready.
func (a *APIServer) StartAPI() {
	a.KubeAPI = a.start("kube-apiserver", a.kapiBin, a.kapiArgs...)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://127.0.0.1:%d/readyz", a.port), nil)
		req.Header.Set("Authorization", "Bearer "+AdminToken)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Since(start) > 90*time.Second {
			a.t.Fatal("kube-apiserver not ready after 90 s")
		}
	}
}

// StopAPI kills kube-apiserver, as a crash would (etcd keeps the data; a
// graceful stop would drain watches for a minute).
func (a *APIServer) StopAPI() {
	a.KubeAPI.Process.Kill()
	a.KubeAPI.Wait()
}

// Config is a client config for the API server that presents token.
func (a *APIServer) Config(token string) *rest.Config {
	return &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", a.port), BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// Port is the API server's loopback port.
func (a *APIServer) Port() int { return a.port }

// applyRBAC creates the objects of deploy/rbac.yaml, the manifests users
// apply, so that the tests run with exactly the rights they grant.
func (a *APIServer) applyRBAC() {
	a.ApplyRBAC(harness.RepoPath("deploy", "rbac.yaml"))
}

// ApplyRBAC creates the ServiceAccounts, Roles, ClusterRoles and their
// bindings of one of deploy/'s manifests, such as a component's rbac.yaml.
func (a *APIServer) ApplyRBAC(path string) {
	a.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		a.t.Fatal(err)
	}
	ctx := context.Background()
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			a.t.Fatal(err)
		}
		switch meta.Kind {
		case "ServiceAccount":
			var o corev1.ServiceAccount
			yaml.Unmarshal(doc, &o)
			_, err = a.Admin.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRole":
			var o rbacv1.ClusterRole
			yaml.Unmarshal(doc, &o)
			_, err = a.Admin.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			yaml.Unmarshal(doc, &o)
			_, err = a.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		case "Role":
			var o rbacv1.Role
			yaml.Unmarshal(doc, &o)
			_, err = a.Admin.RbacV1().Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		case "RoleBinding":
			var o rbacv1.RoleBinding
			yaml.Unmarshal(doc, &o)
			_, err = a.Admin.RbacV1().RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		default:
			a.t.Fatalf("%s: unexpected kind %q", path, meta.Kind)
		}
		if err != nil {
			a.t.Fatalf("apply %s: %v", meta.Kind, err)
		}
	}
}

// NewPod creates a pod on node with the network readiness gate.
func (a *APIServer) NewPod(name, node string) *corev1.Pod {
	a.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:       node,
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "networking.kubernetes.io/pod-network-ready"}},
			Containers:     []corev1.Container{{Name: "app", Image: "example.com/app:1"}},
		},
	}
	out, err := a.Admin.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	return out
}

// Condition returns the pod's network condition, or nil.
func (a *APIServer) Condition(name string) (*corev1.Pod, *corev1.PodCondition) {
	pod, err := a.Admin.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, nil
	}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == "networking.kubernetes.io/pod-network-ready" {
			return pod, &pod.Status.Conditions[i]
		}
	}
	return pod, nil
}

// AuditArgs are kube-apiserver flags that log, as JSON lines in the file
// log, the metadata of every request user makes, and nothing else; the
// policy file goes in dir.
func AuditArgs(t testing.TB, dir, user string) (args []string, log string) {
	t.Helper()
	policy, log := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["`+user+`"]
  - level: None
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--audit-policy-file", policy, "--audit-log-path", log, "--audit-log-format", "json"}, log
}
