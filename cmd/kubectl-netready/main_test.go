package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/pkg/explain"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/offswitch"
	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/pkg/publish"
)

// The tests run this test binary as the command itself: main, with its
// exit code, stdout and stderr, as a shell sees them.
const asCommand = "KUBECTL_NETREADY_TEST_AS_COMMAND"

func TestMain(m *testing.M) {
	if os.Getenv(asCommand) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// command runs kubectl-netready with args and returns its exit code,
// stdout and stderr.
func command(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asCommand+"=1", "KUBECONFIG="+filepath.Join(t.TempDir(), "none"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestEveryUsageErrorNamesTheProblem: a wrong call exits 2 with a message
// on stderr that names what is wrong, and nothing on stdout; no API
// server is asked.
func TestEveryUsageErrorNamesTheProblem(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "kubectl netready: unknown flag: --nope\nRun 'kubectl netready --help' for usage.\n"},
		{[]string{"explain", "-n"}, "kubectl netready explain: flag needs an argument: 'n' in -n\nRun 'kubectl netready explain --help' for usage.\n"},
		{[]string{"status", "--timeout=abc"}, `kubectl netready status: invalid argument "abc" for "--timeout" flag: time: invalid duration "abc"` + "\nRun 'kubectl netready status --help' for usage.\n"},
		{[]string{"status", "--timeout=0s"}, "kubectl netready status: --timeout 0s: must be more than 0\nRun 'kubectl netready status --help' for usage.\n"},
		{[]string{}, "kubectl netready: name a command: explain, status, off or on\nRun 'kubectl netready --help' for usage.\n"},
		{[]string{"bogus"}, "kubectl netready: unknown command \"bogus\": the commands are explain, status, off and on\nRun 'kubectl netready --help' for usage.\n"},
		{[]string{"explain"}, "kubectl netready explain: name one pod, NAME or pod/NAME; got 0 arguments\nRun 'kubectl netready explain --help' for usage.\n"},
		{[]string{"explain", "a", "b"}, "kubectl netready explain: name one pod, NAME or pod/NAME; got 2 arguments\nRun 'kubectl netready explain --help' for usage.\n"},
		{[]string{"explain", "deployment/web"}, "kubectl netready explain: \"deployment/web\" is not a pod: name one as NAME or pod/NAME\nRun 'kubectl netready explain --help' for usage.\n"},
		{[]string{"explain", "pod/"}, "kubectl netready explain: \"pod/\" names no pod: name one as NAME or pod/NAME\nRun 'kubectl netready explain --help' for usage.\n"},
		{[]string{"explain", "web", "-o", "xml"}, "kubectl netready explain: -o \"xml\": use \"json\" or \"yaml\", or leave -o out for text\nRun 'kubectl netready explain --help' for usage.\n"},
		{[]string{"status", "extra"}, "kubectl netready status: unexpected arguments [\"extra\"]: status takes none\nRun 'kubectl netready status --help' for usage.\n"},
		{[]string{"--nope", "status"}, "kubectl netready: unknown flag: --nope\nRun 'kubectl netready --help' for usage.\n"},
	} {
		code, stdout, stderr := command(t, tc.args...)
		if code != 2 || stdout != "" {
			t.Errorf("%q: exit %d, stdout %q; want exit 2 and nothing on stdout", tc.args, code, stdout)
		}
		if diff := cmp.Diff(tc.want, stderr); diff != "" {
			t.Errorf("%q: stderr (-want +got):\n%s", tc.args, diff)
		}
	}
}

// TestHelpIsAnAnswer: --help, -h and -help print the command's own help on
// stdout and exit 0; explain's and status's help say their exit codes.
func TestHelpIsAnAnswer(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"kubectl netready [command]", "explain", "status", "--kubeconfig"}},
		{[]string{"-h"}, []string{"kubectl netready [command]"}},
		{[]string{"-help"}, []string{"kubectl netready [command]"}},
		{[]string{"explain", "--help"}, []string{"explain says whether POD is network-ready", "kubectl netready explain [-n NAMESPACE] (POD | pod/POD)", "Exit status: 0 when the pod's condition is True, 1 otherwise"}},
		{[]string{"explain", "a", "b", "-h"}, []string{"explain says whether POD is network-ready"}},
		{[]string{"status", "--help"}, []string{"status prints a line per node", "Exit status: 0 when no node has a problem, 1 when one has"}},
		{[]string{"help", "status"}, []string{"status prints a line per node"}},
	} {
		code, stdout, stderr := command(t, tc.args...)
		if code != 0 || stderr != "" {
			t.Errorf("%q: exit %d, stderr %q; want exit 0 and nothing on stderr", tc.args, code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("%q: stdout lacks %q:\n%s", tc.args, w, stdout)
			}
		}
	}
	if code, stdout, _ := command(t, "--version"); code != 0 || !strings.HasPrefix(stdout, "kubectl-netready ") {
		t.Errorf("--version: exit %d, %q", code, stdout)
	}
}

// fakeAPI answers the reads kubectl netready makes: a GET of an object in
// objects (by its path below the group version, "pods/demo/web" style
// segments), a list of a resource in lists (all namespaces alike), an
// empty list of any other resource, and 404 for any other object. With
// fail, every request fails with a 500.
type fakeAPI struct {
	objects map[string]any // "namespaces/demo/pods/web"
	lists   map[string][]any
	fail    bool
	// forbidden paths answer 403.
	forbidden map[string]bool

	mu   sync.Mutex
	gets []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.fail {
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcd is down","code":500}`, http.StatusInternalServerError)
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/api/v1/")
	if rest, ok := strings.CutPrefix(r.URL.Path, "/apis/"); ok {
		parts := strings.SplitN(rest, "/", 3)
		path = parts[len(parts)-1]
	}
	segs := strings.Split(path, "/")
	res := segs
	if len(segs) >= 3 && segs[0] == "namespaces" {
		res = segs[2:]
	}
	w.Header().Set("Content-Type", "application/json")
	if len(res) == 1 {
		items := f.lists[res[0]]
		if res[0] == "pods" {
			// netready's own pods by their label, the gated pods of a
			// node by field: none wait here.
			if r.URL.Query().Get("labelSelector") == "" {
				items = nil
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{}, "items": append([]any{}, items...)})
		return
	}
	f.mu.Lock()
	f.gets = append(f.gets, path)
	f.mu.Unlock()
	if f.forbidden[path] {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"%s is forbidden"}`, path)
		return
	}
	obj, ok := f.objects[path]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"%s not found"}`, path)
		return
	}
	json.NewEncoder(w).Encode(obj)
}

// kubeconfig points a kubeconfig file at the fake API server.
func kubeconfig(t *testing.T, api http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: fake, context: {cluster: fake, user: u, namespace: demo}}]
current-context: fake
`, srv.URL)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func node(name string, tainted bool) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if tainted {
		n.Spec.Taints = []corev1.Taint{{Key: nodewriter.Key, Effect: corev1.TaintEffectNoSchedule}}
	}
	return n
}

func netreadyPod(nodeName string, ready bool) corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "netready-" + nodeName, Namespace: "kube-system", Labels: map[string]string{"app": "netready"}},
		Spec:   corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "sidecar", Image: "ghcr.io/netready/netready:v0.6.0"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
}

// TestStatusExitsOneWhenANodeHasAProblem: status exits 0 when every node
// is well, 1 naming each problem on stderr (in every output format, stdout
// keeping only the report), and 2 when the API server cannot answer.
func TestStatusExitsOneWhenANodeHasAProblem(t *testing.T) {
	for _, tc := range []struct {
		name       string
		nodes      []any
		pods       []any
		fail       bool
		args       []string
		code       int
		wantErr    string
		wantStdout string
	}{
		{name: "every node well", nodes: []any{node("a", false), node("b", false)}, pods: []any{netreadyPod("a", true), netreadyPod("b", true)},
			code: 0, wantStdout: "netready-b"},
		{name: "as YAML", nodes: []any{node("a", false)}, pods: []any{netreadyPod("a", true)}, args: []string{"-o", "yaml"},
			code: 0, wantStdout: "- netready:\n    name: netready-a\n"},
		{name: "netready's pod not ready", nodes: []any{node("a", false), node("b", false)}, pods: []any{netreadyPod("a", true), netreadyPod("b", false)},
			code: 1, wantErr: "kubectl netready status: node b: netready pod netready-b is not ready (Running)\n", wantStdout: "netready-b"},
		{name: "tainted, as JSON", nodes: []any{node("a", true)}, pods: []any{netreadyPod("a", true)}, args: []string{"-o", "json"},
			code: 1, wantErr: "kubectl netready status: node a: tainted netready.io/pod-ips-exhausted:NoSchedule\n", wantStdout: `"tainted": true`},
		{name: "the API server fails", fail: true,
			code: 2, wantErr: "kubectl netready status: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc := kubeconfig(t, &fakeAPI{lists: map[string][]any{"nodes": tc.nodes, "pods": tc.pods}, fail: tc.fail})
			code, stdout, stderr := command(t, append([]string{"status", "--kubeconfig", kc, "--timeout", "20s"}, tc.args...)...)
			if code != tc.code || !strings.HasPrefix(stderr, tc.wantErr) || (tc.wantErr == "" && stderr != "") || !strings.Contains(stdout, tc.wantStdout) {
				t.Errorf("exit %d, stderr %q, stdout:\n%s\nwant exit %d, stderr %q, stdout with %q", code, stderr, stdout, tc.code, tc.wantErr, tc.wantStdout)
			}
			if tc.fail && strings.Contains(stderr, "--help") {
				t.Errorf("an API failure is no usage error, yet stderr says to read --help: %q", stderr)
			}
			var nodes []explain.NodeReport
			switch {
			case len(tc.args) > 1 && tc.args[1] == "json":
				if err := json.Unmarshal([]byte(stdout), &nodes); err != nil || len(nodes) != len(tc.nodes) {
					t.Errorf("-o json: %d nodes, %v:\n%s", len(nodes), err, stdout)
				}
			case len(tc.args) > 1 && tc.args[1] == "yaml":
				if err := yaml.Unmarshal([]byte(stdout), &nodes); err != nil || len(nodes) != len(tc.nodes) || nodes[0].Netready == nil || !nodes[0].Netready.Ready {
					t.Errorf("-o yaml: %+v, %v:\n%s", nodes, err, stdout)
				}
			}
		})
	}
}

// TestExplainTakesPodSlashName: explain reads the pod that NAME, pod/NAME,
// pods/NAME or po/NAME names, in the kubeconfig's namespace or -n's, and
// writes the report as text, JSON or YAML; exit 0 for a pod that is
// network-ready, 1 for one that is not.
func TestExplainTakesPodSlashName(t *testing.T) {
	pod := func(name string, ready bool) corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo"},
			Spec:   corev1.PodSpec{NodeName: "a", ReadinessGates: []corev1.PodReadinessGate{{ConditionType: publish.DefaultConditionType}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: publish.DefaultConditionType, Status: status, Reason: "Programmed"}}}}
	}
	api := &fakeAPI{
		objects: map[string]any{"namespaces/demo/pods/web": pod("web", true), "namespaces/other/pods/db": pod("db", false)},
		lists:   map[string][]any{"nodes": {node("a", false)}, "pods": {netreadyPod("a", true)}},
	}
	kc := kubeconfig(t, api)
	for _, tc := range []struct {
		args []string
		code int
		get  string
		want string
	}{
		{[]string{"web"}, 0, "namespaces/demo/pods/web", "pod demo/web"},
		{[]string{"pod/web"}, 0, "namespaces/demo/pods/web", "pod demo/web"},
		{[]string{"pods/web", "-o", "json"}, 0, "namespaces/demo/pods/web", `"networkReady": true`},
		{[]string{"po/web", "-o", "yaml"}, 0, "namespaces/demo/pods/web", "networkReady: true\n"},
		{[]string{"-n", "other", "pod/db"}, 1, "namespaces/other/pods/db", "pod other/db"},
	} {
		api.mu.Lock()
		api.gets = nil
		api.mu.Unlock()
		code, stdout, stderr := command(t, append([]string{"explain", "--kubeconfig", kc}, tc.args...)...)
		api.mu.Lock()
		gets := api.gets
		api.mu.Unlock()
		if code != tc.code || stderr != "" || !strings.Contains(stdout, tc.want) {
			t.Errorf("explain %q: exit %d, stderr %q, stdout:\n%s\nwant exit %d and %q", tc.args, code, stderr, stdout, tc.code, tc.want)
		}
		if !strings.Contains(strings.Join(gets, " "), tc.get) {
			t.Errorf("explain %q read %q, want %s", tc.args, gets, tc.get)
		}
	}
}

// TestProblems: what makes status exit 1, each named.
func TestProblems(t *testing.T) {
	ready := &explain.NetreadyPod{Name: "netready-a", Phase: "Running", Ready: true}
	for _, tc := range []struct {
		name string
		n    explain.NodeReport
		want []string
	}{
		{"well", explain.NodeReport{Node: "a", RuntimeNetworkReady: true, Netready: ready, Waiting: 3}, nil},
		{"no netready pod and no gated pod", explain.NodeReport{Node: "a", RuntimeNetworkReady: true}, nil},
		{"no netready pod where gated pods wait", explain.NodeReport{Node: "a", RuntimeNetworkReady: true, Waiting: 2},
			[]string{"no netready pod, and 2 gated pods wait"}},
		{"runtime network not ready", explain.NodeReport{Node: "a", ReadyMessage: "NetworkReady=false", Netready: ready},
			[]string{"the runtime's network is not ready: NetworkReady=false"}},
		{"pools", explain.NodeReport{Node: "a", RuntimeNetworkReady: true, Netready: ready, Tainted: true, Pools: []explain.Pool{
			{Line: pool.Line{Network: "n1", Source: "host-local", State: pool.StateExhausted}},
			{Line: pool.Line{Network: "n2", Source: "calico-ipam", State: pool.StateUnknown, Why: "syncing"}},
			{Line: pool.Line{Network: "n3", Source: "cilium", State: pool.StateRoom}},
			{Line: pool.Line{Network: "n4", Source: "aws-vpc-cni", State: pool.StateGrows}},
		}}, []string{"tainted netready.io/pod-ips-exhausted:NoSchedule", "pool n1 (host-local) is exhausted", "pool n2 (calico-ipam) can't tell: syncing"}},
		{"a warning", explain.NodeReport{Node: "a", RuntimeNetworkReady: true, Netready: ready, Warnings: []explain.Event{{Reason: "NetreadyConfigInvalid"}}},
			[]string{"warning NetreadyConfigInvalid"}},
	} {
		if diff := cmp.Diff(tc.want, problems(tc.n)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestStatusSaysNetreadyIsOff: while the off switch's ConfigMap exists,
// status's text starts with one line that says so, by whom and how to
// undo it; -o json keeps its list of nodes on stdout, and says it on
// stderr. Being off is no node's problem: the exit status stays 0.
func TestStatusSaysNetreadyIsOff(t *testing.T) {
	cm := corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: offswitch.ConfigMapName,
		CreationTimestamp: metav1.NewTime(time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)),
		ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "kubectl-netready", Operation: metav1.ManagedFieldsOperationUpdate}}}}
	api := &fakeAPI{objects: map[string]any{"namespaces/kube-system/configmaps/netready-off": cm},
		lists: map[string][]any{"nodes": {node("a", false)}, "pods": {netreadyPod("a", true)}}}
	kc := kubeconfig(t, api)
	const line = "netready is OFF since 2026-12-01T09:30:00Z ("
	const by = "), by kubectl-netready (ConfigMap kube-system/netready-off): each running sidecar releases its node's gated pods (True, reason NetreadyOff) and ADD waits on no check; undo: kubectl netready on\n"

	code, stdout, stderr := command(t, "status", "--kubeconfig", kc)
	if code != 0 || stderr != "" || !strings.HasPrefix(stdout, line) || !strings.Contains(stdout, by+"NODE ") {
		t.Errorf("status: exit %d, stderr %q, stdout:\n%s\nwant exit 0 and the off line above the nodes", code, stderr, stdout)
	}
	code, stdout, stderr = command(t, "status", "--kubeconfig", kc, "-o", "json")
	var nodes []explain.NodeReport
	if err := json.Unmarshal([]byte(stdout), &nodes); code != 0 || err != nil || len(nodes) != 1 ||
		!strings.HasPrefix(stderr, "kubectl netready status: "+line) || !strings.HasSuffix(stderr, by) {
		t.Errorf("status -o json: exit %d, %v, stderr %q, stdout:\n%s", code, err, stderr, stdout)
	}
	on := kubeconfig(t, &fakeAPI{lists: api.lists})
	if code, stdout, _ = command(t, "status", "--kubeconfig", on); code != 0 || strings.Contains(stdout, "OFF") {
		t.Errorf("status, on: exit %d, stdout:\n%s", code, stdout)
	}
}

// TestStatusReportsTheNodesWhenTheOffSwitchCannotBeRead: a user who may
// not read the off switch's ConfigMap still gets every node, and is told
// what could not be read.
func TestStatusReportsTheNodesWhenTheOffSwitchCannotBeRead(t *testing.T) {
	api := &fakeAPI{forbidden: map[string]bool{"namespaces/kube-system/configmaps/netready-off": true},
		lists: map[string][]any{"nodes": {node("a", false)}, "pods": {netreadyPod("a", true)}}}
	code, stdout, stderr := command(t, "status", "--kubeconfig", kubeconfig(t, api))
	if code != 0 || !strings.Contains(stdout, "NODE ") || !strings.Contains(stderr, "whether netready is switched off is not known") {
		t.Errorf("status: exit %d, stderr %q, stdout:\n%s\nwant exit 0, the nodes, and what could not be read", code, stderr, stdout)
	}
}
