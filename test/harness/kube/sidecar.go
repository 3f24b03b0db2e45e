//go:build integration

package kube

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/test/harness"
)

// Stays fails the test if the pod's condition stops satisfying ok within
// d.
func Stays(t *testing.T, a *APIServer, pod string, d time.Duration, what string, ok func(*corev1.PodCondition) bool) {
	t.Helper()
	for start := time.Now(); time.Since(start) < d; time.Sleep(100 * time.Millisecond) {
		if _, c := a.Condition(pod); c == nil || !ok(c) {
			t.Fatalf("pod %s: %s: no longer so: %+v", pod, what, c)
		}
	}
}

// SetSandboxStatus writes what kubelet posts about a pod's sandbox:
// PodReadyToStartContainers (its transition now) and the pod's IP.
func SetSandboxStatus(t *testing.T, a *APIServer, name string, up corev1.ConditionStatus, ip string) {
	t.Helper()
	for range 20 {
		pod, err := a.Admin.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cond := corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: up, LastTransitionTime: metav1.Now()}
		i := len(pod.Status.Conditions)
		for j, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReadyToStartContainers {
				i = j
			}
		}
		if i == len(pod.Status.Conditions) {
			pod.Status.Conditions = append(pod.Status.Conditions, cond)
		} else {
			pod.Status.Conditions[i] = cond
		}
		pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		_, err = a.Admin.CoreV1().Pods("default").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("pod status kept conflicting")
}

// EventsFor reads the pod's Events back from the API server (events.k8s.io).
func EventsFor(t *testing.T, a *APIServer, pod *corev1.Pod) []string {
	t.Helper()
	var out []string
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(200 * time.Millisecond) {
		list, err := a.Admin.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = out[:0]
		for _, e := range list.Items {
			if e.Regarding.UID == pod.UID {
				out = append(out, e.Type+" "+e.Reason+": "+e.Note)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return out
}

// SidecarNode is the node name the sidecar tests give their pods and sidecar.
const SidecarNode = "node-1"

// WaitCondition waits up to limit for the pod's network condition to
// satisfy ok.
func WaitCondition(t *testing.T, a *APIServer, pod string, limit time.Duration, what string, ok func(*corev1.PodCondition) bool) *corev1.PodCondition {
	t.Helper()
	var last *corev1.PodCondition
	for start := time.Now(); time.Since(start) < limit; time.Sleep(50 * time.Millisecond) {
		if _, c := a.Condition(pod); c != nil {
			last = c
			if ok(c) {
				return c
			}
		}
	}
	t.Fatalf("pod %s: %s: not within %s; last condition %+v", pod, what, limit, last)
	return nil
}

// StartSidecar runs bin/netready-sidecar with the static agent identity
// (the sidecar's ServiceAccount name, no node claim).
func StartSidecar(t testing.TB, a *APIServer, stateDir, node string, extra ...string) (string, *harness.SyncBuffer) {
	t.Helper()
	return StartSidecarWith(t, a, a.AgentKubeconfig, stateDir, node, extra...)
}

// StartSidecarWith runs bin/netready-sidecar with the identity of kubeconfig.
func StartSidecarWith(t testing.TB, a *APIServer, kubeconfig, stateDir, node string, extra ...string) (string, *harness.SyncBuffer) {
	t.Helper()
	listen, logs, _ := StartSidecarProc(t, kubeconfig, stateDir, node, extra...)
	return listen, logs
}

// StartSidecarProc is StartSidecarWith that also returns a stop function,
// for tests that restart the sidecar; the test's cleanup stops it too.
// Most tests run it without the admission policies, so --require-scope
// is off unless extra sets it.
func StartSidecarProc(t testing.TB, kubeconfig, stateDir, node string, extra ...string) (string, *harness.SyncBuffer, func()) {
	t.Helper()
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--require-scope") }) {
		extra = append([]string{"--require-scope=false"}, extra...)
	}
	listen, logs, stop := RunSidecar(t, kubeconfig, stateDir, node, extra...)
	if why := SidecarReadyz(listen, 30*time.Second, 200); why != "" {
		t.Fatalf("sidecar not ready: %s\n%s", why, logs.String())
	}
	return listen, logs, stop
}

// RunSidecar starts bin/netready-sidecar and returns at once.
func RunSidecar(t testing.TB, kubeconfig, stateDir, node string, extra ...string) (string, *harness.SyncBuffer, func()) {
	t.Helper()
	listen := "127.0.0.1:" + strconv.Itoa(harness.FreePort(t))
	args := append([]string{"--state-dir", stateDir, "--node-name", node, "--kubeconfig", kubeconfig, "--listen", listen}, extra...)
	cmd := exec.Command(filepath.Join(harness.BinDir, "netready-sidecar"), args...)
	var logs harness.SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("sidecar log:\n%s", harness.Tail(logs.String(), 60))
		}
	})
	return listen, &logs, stop
}

// SidecarReadyz polls /readyz until it answers want, for at most within;
// it returns "" then, else what /readyz said last.
func SidecarReadyz(listen string, within time.Duration, want int) string {
	client := &http.Client{Timeout: time.Second}
	last := "no answer"
	for start := time.Now(); time.Since(start) < within; time.Sleep(100 * time.Millisecond) {
		resp, err := client.Get("http://" + listen + "/readyz")
		if err != nil {
			last = err.Error()
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == want {
			return ""
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
	}
	return last
}

// MetricsText scrapes the sidecar's /metrics at listen.
func MetricsText(t testing.TB, listen string) string {
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

// SumSeries adds up the samples of metric name in a Prometheus text
// exposition whose labels hold every one of labels (`key="value"`).
func SumSeries(exposition, name string, labels ...string) int {
	total := 0
	for _, l := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(l, name+"{") || slices.ContainsFunc(labels, func(want string) bool { return !strings.Contains(l, want) }) {
			continue
		}
		v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		total += int(v)
	}
	return total
}
