//go:build integration

package kube

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/nodewriter"
)

// TaintWatch records what a watch on one Node sees of netready's taint:
// when it first came and first went, and how often it went.
type TaintWatch struct {
	mu             sync.Mutex
	has            bool
	added, removed time.Time
	removals       int
}

// WatchTaint watches node's taints until the test ends.
func WatchTaint(t *testing.T, admin kubernetes.Interface, node string) *TaintWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := admin.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	tw := &TaintWatch{}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			has := nodewriter.Has(ev.Object.(*corev1.Node))
			tw.mu.Lock()
			switch {
			case has && !tw.has && tw.added.IsZero():
				tw.added = time.Now()
			case !has && tw.has:
				tw.removals++
				if tw.removed.IsZero() {
					tw.removed = time.Now()
				}
			}
			tw.has = has
			tw.mu.Unlock()
		}
	}()
	return tw
}

// FirstTimes is when the taint was first seen to come and to go.
func (tw *TaintWatch) FirstTimes() (added, removed time.Time) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return tw.added, tw.removed
}

// RemovalCount is how many times the taint was seen to go.
func (tw *TaintWatch) RemovalCount() int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return tw.removals
}

// Node gets a Node as the admin.
func (a *APIServer) Node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := a.Admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
