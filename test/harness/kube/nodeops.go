//go:build integration

package kube

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/conflist"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness"
)

// PodStatusWrites is the API server's count of pods/status PATCH and PUT
// requests so far (apiserver_request_total).
func (n *K8sNode) PodStatusWrites() int {
	n.T.Helper()
	data, err := n.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		n.T.Fatalf("the API server's /metrics: %v", err)
	}
	return SumSeries(string(data), "apiserver_request_total", `resource="pods"`, `subresource="status"`, `verb="PATCH"`) +
		SumSeries(string(data), "apiserver_request_total", `resource="pods"`, `subresource="status"`, `verb="PUT"`)
}

// Kubectl runs the real kubectl as the node's admin.
func (n *K8sNode) Kubectl(args ...string) string {
	n.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append([]string{"--kubeconfig", n.Path("pki/admin.kubeconfig"), "--cache-dir", n.Path("kubectl-cache")}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(n.Bins, "kubectl"), full...).CombinedOutput()
	if err != nil {
		n.T.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// RuntimeHasNetready reports whether containerd's loaded CNI config (as
// crictl info shows it) chains netready in.
func (n *K8sNode) RuntimeHasNetready() bool {
	out, err := n.CRI.Crictl("info", "-o", "json")
	if err != nil {
		return false
	}
	var info map[string]json.RawMessage
	json.Unmarshal([]byte(out), &info)
	return strings.Contains(string(info["cniconfig"]), "netready")
}

// ImportImage loads an OCI archive into containerd's k8s.io namespace.
func (n *K8sNode) ImportImage(archive string) {
	n.T.Helper()
	if err := n.CRI.ImportImage(archive); err != nil {
		n.T.Fatal(err)
	}
}

// Heartbeat keeps the agent's heartbeat file fresh until paused.
type Heartbeat struct {
	path   string
	Paused atomic.Bool
}

// StartHeartbeat writes the heartbeat file at path and keeps it fresh until
// the test ends.
func StartHeartbeat(t testing.TB, path string) *Heartbeat {
	h := &Heartbeat{path: path}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	os.WriteFile(path, nil, 0o644)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			if !h.Paused.Load() {
				now := time.Now()
				os.Chtimes(path, now, now)
			}
		}
	}()
	return h
}

// NodePod is a pod of the pause image on the node; gated adds the gate.
func NodePod(name string, gated bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{NodeName: NodeName, TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "app", Image: "netready.test/pause:1", ImagePullPolicy: corev1.PullNever}}},
	}
	if gated {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: NodeConditionType}}
	}
	return p
}

// CreateUnschedulable creates a pod for the scheduler to place, and
// returns the note of the FailedScheduling event it gets. The 1.36
// scheduler names no taint key ("node(s) had untolerated taint(s)").
func (n *K8sNode) CreateUnschedulable(name string) string {
	n.T.Helper()
	p := NodePod(name, false)
	p.Spec.NodeName = ""
	n.Program(name)
	n.CreatePod(p)
	var note string
	n.WaitFor("FailedScheduling for "+name+" naming an untolerated taint", time.Minute, func() bool {
		evs, _ := n.Admin.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == "FailedScheduling" && strings.Contains(e.Note, "untolerated taint") {
				note = e.Note
				return true
			}
		}
		return false
	})
	return note
}

// CreatePod creates p as the node's admin.
func (n *K8sNode) CreatePod(p *corev1.Pod) {
	n.T.Helper()
	if _, err := n.Admin.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		n.T.Fatal(err)
	}
}

// Pod gets a pod of the default namespace, or an empty one if it cannot.
func (n *K8sNode) Pod(name string) *corev1.Pod {
	p, err := n.Admin.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return &corev1.Pod{}
	}
	return p
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ProgramLater plays Felix: once the pod's address is allocated (its veth
// exists), it waits delay and writes the pod's endpoint-status file, which
// the calico preset waits for. It returns when the file was written.
func (n *K8sNode) ProgramLater(name string, delay time.Duration) <-chan time.Time {
	before := n.Allocations()
	done := make(chan time.Time, 1)
	go func() {
		for start := time.Now(); n.Allocations() <= before && time.Since(start) < time.Minute; time.Sleep(20 * time.Millisecond) {
		}
		time.Sleep(delay)
		n.ProgramIn("default", name)
		done <- time.Now()
	}()
	return done
}

// Program is ProgramIn for the default namespace.
func (n *K8sNode) Program(name string) { n.ProgramIn("default", name) }

// ProgramIn writes the pod's Calico status file, as Felix does once it has
// programmed the pod.
func (n *K8sNode) ProgramIn(namespace, name string) {
	os.WriteFile(filepath.Join(n.Path("calico"), checks.CalicoStatusFileName(namespace, name, "eth0")), []byte("{}"), 0o644)
}

// Allocations counts the addresses host-local has allocated on the node.
func (n *K8sNode) Allocations() int {
	entries, _ := os.ReadDir(n.Path("ipam/nr-node"))
	c := 0
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			c++
		}
	}
	return c
}

// MarkerFor finds the pod's marker by its UID.
func (n *K8sNode) MarkerFor(p *corev1.Pod) *marker.Marker {
	m, _ := n.MarkerFileFor(p)
	return m
}

// MarkerFileFor is MarkerFor with the marker's path.
func (n *K8sNode) MarkerFileFor(p *corev1.Pod) (*marker.Marker, string) {
	entries, _ := os.ReadDir(n.Path("state/nr-node"))
	for _, e := range entries {
		path := n.Path("state/nr-node/" + e.Name())
		if m, err := marker.ReadFile(path); err == nil && m.Pod.UID == string(p.UID) {
			return m, path
		}
	}
	return nil, ""
}

// WaitPod waits up to limit for the pod to satisfy ok.
func (n *K8sNode) WaitPod(name, what string, limit time.Duration, ok func(*corev1.Pod) bool) *corev1.Pod {
	n.T.Helper()
	var p *corev1.Pod
	for start := time.Now(); time.Since(start) < limit; time.Sleep(100 * time.Millisecond) {
		if p = n.Pod(name); ok(p) {
			return p
		}
	}
	n.T.Fatalf("pod %s: %s: not within %s; status %+v", name, what, limit, p.Status)
	return nil
}

// Entry is the netready entry of the conflist the runtime loads.
func (n *K8sNode) Entry() map[string]any {
	n.T.Helper()
	f, err := conflist.Pick(n.ConfDir, "")
	if err != nil {
		n.T.Fatal(err)
	}
	var found map[string]any
	count := 0
	for _, p := range f.Plugins {
		var m map[string]any
		json.Unmarshal(p, &m)
		if m["type"] == "netready" {
			found, count = m, count+1
		}
	}
	if count > 1 {
		n.T.Errorf("%d netready entries in %s", count, f.Path)
	}
	return found
}

// UnpackRelease does the Quick start's first steps in the node's own
// folder: the release's deploy/ beside test/node's kustomization, and the
// release's image imported into the node's containerd.
func (n *K8sNode) UnpackRelease() string {
	n.T.Helper()
	dist, version := harness.ReleaseDir(n.T)
	dir := n.Path("quickstart")
	os.MkdirAll(dir, 0o755)
	harness.MustRun(n.T, "tar", "-xzf", filepath.Join(dist, "netready-"+version+"-deploy.tar.gz"), "-C", dir)
	files, _ := filepath.Glob(harness.RepoPath("test", "node", "*"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644)
	}
	n.ImportImage(filepath.Join(dist, "netready-image.tar"))
	return dir
}

// Netready runs the release's kubectl plugin as an operator does,
// `kubectl netready ARGS`, found by kubectl on PATH, and returns its
// output and exit code.
func (n *K8sNode) Netready(args ...string) (string, int) {
	n.T.Helper()
	bin := n.Path("quickstart/bin")
	if _, err := os.Stat(filepath.Join(bin, "kubectl-netready")); err != nil {
		dist, version := harness.ReleaseDir(n.T)
		os.MkdirAll(bin, 0o755)
		harness.MustRun(n.T, "tar", "-xzf", filepath.Join(dist, "netready-"+version+"-linux-"+runtime.GOARCH+".tar.gz"), "-C", bin, "kubectl-netready")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.Bins, "kubectl"), append([]string{"netready"}, args...)...)
	// kubectl takes no flags before a plugin's name; the plugin reads
	// KUBECONFIG as kubectl does.
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+n.Path("pki/admin.kubeconfig"))
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		n.T.Fatalf("kubectl netready %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), code
}

// ExplainSays runs kubectl netready explain on a pod and checks its exit
// code and that its output holds every part.
func (n *K8sNode) ExplainSays(pod string, wantCode int, parts ...string) string {
	n.T.Helper()
	out, code := n.Netready("explain", "-n", "default", pod)
	if code != wantCode {
		n.T.Errorf("kubectl netready explain %s exited %d, want %d:\n%s", pod, code, wantCode, out)
	}
	for _, p := range parts {
		if !strings.Contains(out, p) {
			n.T.Errorf("kubectl netready explain %s does not say %q:\n%s", pod, p, out)
		}
	}
	return out
}

// EditKustomization rewrites the node's kustomization, as an operator
// edits theirs.
func (n *K8sNode) EditKustomization(dir string, edit func(string) string) {
	n.T.Helper()
	path := filepath.Join(dir, "kustomization.yaml")
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(edit(string(data))), 0o644); err != nil {
		n.T.Fatal(err)
	}
}

// EntryConfigMap is the name of the entry ConfigMap the DaemonSet mounts.
func (n *K8sNode) EntryConfigMap() string {
	ds, err := n.Admin.AppsV1().DaemonSets("kube-system").Get(context.Background(), "netready", metav1.GetOptions{})
	if err != nil {
		n.T.Fatal(err)
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "entry" && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	n.T.Fatal("the DaemonSet mounts no entry ConfigMap")
	return ""
}

// apiServerAnswers asks the API server its version, within 5 s: a probe
// that hangs must not stretch the wait it serves.
func (n *K8sNode) apiServerAnswers() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return n.Admin.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error()
}

// RollOutUninstall takes netready off the node as the README's Uninstall
// does, first step: components/uninstall added to the kustomization in
// dir and rolled out, until the entry has left the conflist and
// containerd has loaded it.
func (n *K8sNode) RollOutUninstall(dir string) {
	n.T.Helper()
	n.EditKustomization(dir, func(k string) string {
		return strings.Replace(k, "deploy/components/pool]", "deploy/components/pool, deploy/components/uninstall]", 1)
	})
	n.Kubectl("apply", "-k", dir, "--server-side")
	n.Kubectl("-n", "kube-system", "rollout", "status", "daemonset/netready", "--timeout=2m")
	n.WaitFor("netready out of the conflist", time.Minute, func() bool { return n.Entry() == nil })
	n.WaitFor("containerd loading the conflist without netready", time.Minute, func() bool { return !n.RuntimeHasNetready() })
}

// DeleteNetready is the Uninstall's second step: the objects of the
// kustomization in dir deleted, until netready's pods are gone.
func (n *K8sNode) DeleteNetready(dir string) {
	n.T.Helper()
	n.Kubectl("delete", "-k", dir, "--wait=true")
	n.WaitFor("the netready pods gone", 2*time.Minute, func() bool {
		pods, err := n.Admin.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app=netready"})
		return err == nil && len(pods.Items) == 0
	})
}
