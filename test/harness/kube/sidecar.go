//go:build integration

package harness

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
