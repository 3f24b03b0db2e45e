package ovnpool

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/netready/netready/pkg/kubeapi/kubeapitest"
	"github.com/netready/netready/pkg/pool"
)

// TestWatcher: the count cannot tell until the Node and the pods are
// read, then follows the node's pods (only its own), and keeps the subnet
// it read when a later read of the Node fails.
func TestWatcher(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{NodeSubnets: `{"default":["10.244.1.0/29"]}`}}}
	pod := func(name, nodeName, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{PodNetworks: `{"default":{"ip_addresses":["` + ip + `/29"]}}`}},
			Spec: corev1.PodSpec{NodeName: nodeName}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	client := fake.NewClientset(node, pod("a", "n1", "10.244.1.3"), pod("other", "n2", "10.244.1.4"))
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
	waitFor(t, "one pod counted (not n2's)", func() bool { return used() == 1 })
	if w.Syncing() {
		t.Error("after the first count: Syncing() = true")
	}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, pod("b", "n1", "10.244.1.5"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two pods counted", func() bool { return used() == 2 })
	if err := client.CoreV1().Pods("ns").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a deleted pod's address freed", func() bool { return used() == 1 })

	client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{})
	if err := w.readNode(ctx); err == nil {
		t.Fatal("reading a deleted Node: no error")
	}
	if got := used(); got != 1 {
		t.Errorf("after a failed read of the Node: used %d, want the count on the subnet read before (1)", got)
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
