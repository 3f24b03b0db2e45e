package ovn

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/netready/netready/pkg/kubeapi/kubeapitest"
	"github.com/netready/netready/pkg/pool"
)

// TestWatcher: the count cannot tell until the Node and the pods are
// read, then follows the addresses kubelet posts for the node's pods (only
// its own; never their annotations), and keeps the subnet it read when a
// later read of the Node fails.
func TestWatcher(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`}}}
	pod := func(name, nodeName, ip string) *corev1.Pod {
		p := testPod(name, corev1.PodRunning, ip)
		p.Spec.NodeName = nodeName
		return p
	}
	// A tenant's pod bound to n1 by its spec, claiming the rest of the
	// subnet in ovnkube's annotation: kubelet has posted no address.
	claim := annotated(pod("claim", "n1", ""), `{"default":{"ip_addresses":["10.244.1.4/29","10.244.1.5/29","10.244.1.6/29"]}}`)
	claim.Status = corev1.PodStatus{Phase: corev1.PodPending}
	client := fake.NewClientset(node, pod("a", "n1", "10.244.1.3"), pod("other", "n2", "10.244.1.4"), claim)
	w := New(Options{Client: kubeapitest.Fake{C: client}, Node: "n1", Log: slog.New(slog.NewTextHandler(io.Discard, nil)), NodeRefresh: time.Hour})
	if c := w.Count(context.Background(), pool.Scope{IPv4: true, IPv6: true}); !strings.Contains(c.Unknown, "not been read yet") {
		t.Errorf("before Run: %+v, want cannot tell", c)
	}
	if !w.Syncing() {
		t.Error("before Run: Syncing() = false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	used := func() int64 {
		c := w.Count(context.Background(), pool.Scope{IPv4: true, IPv6: true})
		if c.Unknown != "" || len(c.Ranges) != 1 {
			return -1
		}
		return c.Ranges[0].Used
	}
	waitFor(t, "one pod counted (not n2's, not the claim)", func() bool { return used() == 1 })
	if w.Syncing() {
		t.Error("after the first count: Syncing() = true")
	}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, pod("b", "n1", "10.244.1.5"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two pods counted", func() bool { return used() == 2 })
	// kubelet runs the claiming pod: ovnkube gave it one address, .6.
	claim.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.6", PodIPs: []corev1.PodIP{{IP: "10.244.1.6"}}}
	if _, err := client.CoreV1().Pods("ns").UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claiming pod counted once kubelet posted its address", func() bool { return used() == 3 })
	if err := client.CoreV1().Pods("ns").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a deleted pod's address freed", func() bool { return used() == 2 })

	client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{})
	if err := w.readNode(ctx); err == nil {
		t.Fatal("reading a deleted Node: no error")
	}
	if got := used(); got != 2 {
		t.Errorf("after a failed read of the Node: used %d, want the count on the subnet read before (2)", got)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestWatcherLogsASkippedPodOnce: a pod the count cannot read is named in
// the log when it first appears, not at every count, and the rest of the
// node is still counted.
func TestWatcherLogsASkippedPodOnce(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`}}}
	bad, good := testPod("bad", corev1.PodRunning, "not-an-ip"), testPod("good", corev1.PodRunning, "10.244.1.3")
	bad.Spec.NodeName, good.Spec.NodeName = "n1", "n1"
	var logs strings.Builder
	var mu sync.Mutex
	w := New(Options{Client: kubeapitest.Fake{C: fake.NewClientset(node, bad, good)}, Node: "n1", NodeRefresh: time.Hour,
		Log: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var c pool.Count
	waitFor(t, "a count", func() bool {
		c = w.Count(context.Background(), pool.Scope{IPv4: true})
		return c.Unknown == ""
	})
	for range 3 {
		c = w.Count(context.Background(), pool.Scope{IPv4: true})
	}
	if len(c.Ranges) != 1 || c.Ranges[0].Used != 1 || !strings.Contains(c.Said, `1 pod skipped, unreadable: pod ns/bad`) {
		t.Errorf("count = %+v, want 1 used, naming ns/bad as skipped", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "pod ns/bad"); n != 1 {
		t.Errorf("ns/bad named %d times in the log, want once:\n%s", n, logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
