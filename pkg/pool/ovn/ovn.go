// Package ovn owns counting a node's ovn-kubernetes pool for the
// sidecar: the node's subnet from its Node's k8s.ovn.org/node-subnets
// annotation, less the addresses ovnkube reserves, against the addresses
// kubelet posted for the node's pods (status.podIPs), never the pods'
// annotations, which a tenant can write. Both are in the API server, so
// the node's plugin cannot read them: the sidecar counts, and STATUS
// reads its verdict (pkg/pool).
package ovn

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/pool"
)

// Options are what the watch is told.
type Options struct {
	// Client reads this node's pods (list, watch) and its Node (get),
	// which the sidecar's RBAC allows.
	Client kubeapi.Client
	Node   string
	Log    *slog.Logger
	// NodeRefresh is how often the Node is read again for its subnets
	// (DefaultNodeRefresh when not positive). ovnkube gives a node its
	// subnet once, and the sidecar may only get its Node, not watch it.
	NodeRefresh time.Duration
}

// DefaultNodeRefresh: a node's subnet changes only when the Node is made
// again, and each read is a GET per node.
const DefaultNodeRefresh = 5 * time.Minute

// nodeRetry is how soon a Node that could not be read, or has no subnet
// yet, is read again.
const nodeRetry = 10 * time.Second

// Watcher counts the node's ovn-kubernetes pool from a watch of its pods
// and reads of its Node.
type Watcher struct {
	o Options

	mu sync.Mutex
	// annotations are the Node's ovn annotations at the last read that
	// succeeded; nodeErr is why the last read failed.
	annotations map[string]string
	nodeErr     error
	// skipped names the pods the last count could not read, logged when
	// it changes rather than at every count.
	skipped string
	pods    cache.Store
	synced  func() bool
}

// New returns the count of o.Node's pool; Run starts its watches.
func New(o Options) *Watcher {
	if o.NodeRefresh <= 0 {
		o.NodeRefresh = DefaultNodeRefresh
	}
	return &Watcher{o: o, synced: func() bool { return false }}
}

// Type is "ovn-kubernetes".
func (w *Watcher) Type() string { return config.IPAMOVN }

// Run watches the node's pods and reads its Node until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	inf := w.podInformer()
	w.mu.Lock()
	w.pods, w.synced = inf.GetStore(), inf.HasSynced
	w.mu.Unlock()
	go inf.RunWithContext(ctx)
	for {
		wait := w.o.NodeRefresh
		if err := w.readNode(ctx); err != nil {
			wait = nodeRetry
			w.o.Log.Warn("ovn-kubernetes pool: cannot read the Node's subnet; retrying", "node", w.o.Node, "after", wait, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// readNode reads the Node's ovn annotations.
func (w *Watcher) readNode(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, kubeapi.Timeout)
	defer cancel()
	node, err := w.o.Client.GetNode(ctx, w.o.Node)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		// The subnet last read stands: ovnkube does not change it.
		w.nodeErr = fmt.Errorf("get node %s: %w", w.o.Node, err)
		return w.nodeErr
	}
	w.nodeErr, w.annotations = nil, ovnAnnotations(node.Annotations)
	_, err = parseNodeSubnets(w.annotations)
	return err
}

// ovnAnnotations keeps the annotations the count reads.
func ovnAnnotations(all map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{NodeSubnets, hybridOverlayIP, hybridOverlayMAC} {
		if v, ok := all[k]; ok {
			out[k] = v
		}
	}
	return out
}

// Count is the pool as of the last read of the Node and the pod cache.
// It cannot tell until both have been read. The node's subnets are all
// its pods take from: there is no scope to narrow.
func (w *Watcher) Count(context.Context, pool.Scope) pool.Count {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.annotations == nil && w.nodeErr != nil:
		return pool.Count{Unknown: "ovn-kubernetes: " + w.nodeErr.Error()}
	case w.annotations == nil:
		return pool.Count{Unknown: "ovn-kubernetes: the Node has not been read yet"}
	case !w.synced():
		return pool.Count{Unknown: "ovn-kubernetes: the node's pods have not been listed yet"}
	}
	var pods []*corev1.Pod
	for _, obj := range w.pods.List() {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName == w.o.Node {
			pods = append(pods, pod)
		}
	}
	cnt, skipped := count(w.annotations, pods)
	if skipped != w.skipped {
		w.skipped = skipped
		if skipped != "" {
			w.o.Log.Warn("ovn-kubernetes pool: counting without pods it cannot read", "node", w.o.Node, "skipped", skipped)
		}
	}
	return cnt
}

// Syncing is true while Count cannot tell only because the Node or the
// node's pods have not been read yet: not when the Node read failed for a
// reason retrying does not cure (RBAC, no such Node).
func (w *Watcher) Syncing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.annotations == nil {
		return !apierrors.IsNotFound(w.nodeErr) && !apierrors.IsForbidden(w.nodeErr)
	}
	return !w.synced()
}

// podInformer lists and watches this node's pods (by field selector) and
// keeps of each only what the count reads: its name, node, host network,
// phase and addresses.
func (w *Watcher) podInformer() cache.SharedIndexInformer {
	selector := "spec.nodeName=" + w.o.Node
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return w.o.Client.ListPods(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return w.o.Client.WatchPods(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, w.o.Client), &corev1.Pod{}, 0, cache.Indexers{})
	// SetTransform fails only once the informer runs; it has not yet.
	_ = inf.SetTransform(func(obj any) (any, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		slim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion}}
		slim.Spec.NodeName, slim.Spec.HostNetwork = pod.Spec.NodeName, pod.Spec.HostNetwork
		slim.Status.Phase, slim.Status.PodIP, slim.Status.PodIPs = pod.Status.Phase, pod.Status.PodIP, pod.Status.PodIPs
		return slim, nil
	})
	return inf
}
