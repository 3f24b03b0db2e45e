// Package calico counts a node's pod addresses under Calico IPAM
// (calico-ipam, Kubernetes datastore). calico-ipam keeps no count on the
// node: its blocks, block affinities, IPAM configuration and IP pools are
// custom resources (crd.projectcalico.org/v1), so the sidecar watches them
// and judges by calico-ipam's own auto-assign rules whether a pod on this
// node can still get an address.
package calico

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/pool"
)

// Group is Calico's CRD API group.
const Group = "crd.projectcalico.org"

// Resources are the four resources the watcher reads, all cluster-scoped;
// deploy/components/calico grants get, list and watch on exactly these.
var (
	IPAMBlocks      = schema.GroupVersionResource{Group: Group, Version: "v1", Resource: "ipamblocks"}
	BlockAffinities = schema.GroupVersionResource{Group: Group, Version: "v1", Resource: "blockaffinities"}
	IPAMConfigs     = schema.GroupVersionResource{Group: Group, Version: "v1", Resource: "ipamconfigs"}
	IPPools         = schema.GroupVersionResource{Group: Group, Version: "v1", Resource: "ippools"}
)

// nodes is where the watcher reads its own Node's labels.
var nodes = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// Options configure a Watcher.
type Options struct {
	// Dynamic reads Calico's kinds and this node's labels; the typed
	// clientset would grow every sidecar for one GET (docs/benchmarks.md).
	Dynamic dynamic.Interface
	// Node is this node's name: its blocks are those with affinity
	// "host:<Node>".
	Node string
	Log  *slog.Logger
	// StaleAfter is how long a watch may keep failing after it synced
	// before what it holds is too old to count: 0 is staleAfter.
	StaleAfter time.Duration
}

// staleAfter is how long a watch may keep failing before its data is
// stale: as old as STATUS trusts the sidecar's verdict (pool.VerdictMaxAge).
// A verdict counted from older data would be stamped fresh and trusted
// for as long as the watch fails.
const staleAfter = pool.VerdictMaxAge

// Watcher watches Calico's IPAM objects and reads this node's labels, and
// counts from what it holds; it lists each kind once and then only
// watches (no periodic resync).
type Watcher struct {
	opts      Options
	informers []*watched
	// labels are this node's, nil until read; nodeErr the last read's error.
	nodeMu  sync.Mutex
	labels  map[string]string
	nodeErr error
	// now is the clock cooldowns are read against.
	now func() time.Time
}

// watched is one informer and the last error listing or watching it,
// with when its calls began to fail (since the last that did not).
type watched struct {
	what  string
	inf   cache.SharedIndexInformer
	clock func() time.Time
	mu    sync.Mutex
	err   error
	since time.Time
}

func (w *watched) setErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil && w.err == nil {
		w.since = w.clock()
	}
	w.err = err
}

func (w *watched) lastErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// failing is the last error and since when calls have failed; nil when
// the last call did not.
func (w *watched) failing() (time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.since, w.err
}

// New makes a Watcher; Run starts it.
func New(o Options) *Watcher {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = staleAfter
	}
	w := &Watcher{opts: o, now: time.Now}
	for _, r := range []struct {
		gvr  schema.GroupVersionResource
		conv func(*unstructured.Unstructured) any
	}{
		{IPAMBlocks, func(u *unstructured.Unstructured) any { return toBlock(u) }},
		{BlockAffinities, func(u *unstructured.Unstructured) any { return toAffinity(u) }},
		{IPAMConfigs, func(u *unstructured.Unstructured) any { return toConfig(u) }},
		{IPPools, func(u *unstructured.Unstructured) any { return toPool(u) }},
	} {
		w.informers = append(w.informers, w.crdInformer(r.gvr, r.conv))
	}
	return w
}

// Type is the status.ipam type this source counts.
func (w *Watcher) Type() string { return config.IPAMCalico }

// record wraps a list or watch so that its last error is kept for Count
// (a forbidden list is RBAC missing, not a pool that cannot be counted)
// and cleared when one succeeds.
func record[T any](w *watched, f func() (T, error)) (T, error) {
	v, err := f()
	w.setErr(err)
	return v, err
}

func (w *Watcher) crdInformer(gvr schema.GroupVersionResource, conv func(*unstructured.Unstructured) any) *watched {
	ww := &watched{what: gvr.Resource + "." + gvr.Group, clock: func() time.Time { return w.now() }}
	ri := w.opts.Dynamic.Resource(gvr)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return record(ww, func() (runtime.Object, error) { return ri.List(ctx, o) })
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return record(ww, func() (watch.Interface, error) { return ri.Watch(ctx, o) })
		},
	}
	ww.inf = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, w.opts.Dynamic),
		&unstructured.Unstructured{}, 0, cache.Indexers{})
	// SetTransform fails only once the informer runs; it has not yet.
	_ = ww.inf.SetTransform(transform(conv))
	return ww
}

// nodeLabelsEvery is how often the watcher reads its Node's labels (for
// IP pools' nodeSelector). The sidecar may get its own Node, not list or
// watch nodes, so it reads rather than watches; labels seldom change.
const nodeLabelsEvery = 30 * time.Second

// readNode reads this node's labels, within a bounded time.
func (w *Watcher) readNode(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := w.opts.Dynamic.Resource(nodes).Get(ctx, w.opts.Node, metav1.GetOptions{})
	w.nodeMu.Lock()
	defer w.nodeMu.Unlock()
	w.nodeErr = err
	if err == nil {
		w.labels = n.GetLabels()
		if w.labels == nil {
			w.labels = map[string]string{}
		}
	}
}

// Run starts the informers and returns when ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, ww := range w.informers {
		wg.Go(func() { ww.inf.RunWithContext(ctx) })
	}
	wg.Go(func() {
		t := time.NewTicker(nodeLabelsEvery)
		defer t.Stop()
		for {
			w.readNode(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	wg.Wait()
}

// Count counts the node's pool, in what scope names, from what the
// informers hold. It cannot tell until every informer has listed once, and
// while the sidecar may not read Calico's objects.
func (w *Watcher) Count(ctx context.Context, scope pool.Scope) pool.Count {
	for _, ww := range w.informers {
		if err := ww.lastErr(); err != nil {
			if u := unknownFor(ww.what, err); u != "" {
				return pool.Count{Unknown: u}
			}
		}
	}
	for _, ww := range w.informers {
		if !ww.inf.HasSynced() {
			msg := "calico-ipam: still reading " + ww.what + " from the API server"
			if err := ww.lastErr(); err != nil {
				msg += ": " + err.Error()
			}
			return pool.Count{Unknown: msg}
		}
		// A watch that keeps failing after it synced holds what it had
		// when it broke: counted for a while, then too old to count.
		if since, err := ww.failing(); err != nil && w.now().Sub(since) >= w.opts.StaleAfter {
			return pool.Count{Unknown: fmt.Sprintf("calico-ipam: the watch of %s has failed since %s, so what the sidecar holds of it is stale: %v",
				ww.what, since.UTC().Format(time.RFC3339), err)}
		}
	}
	if err := ctx.Err(); err != nil {
		return pool.Count{Unknown: "calico-ipam: " + err.Error()}
	}
	s := w.snapshot()
	if s.labels == nil {
		w.nodeMu.Lock()
		err := w.nodeErr
		w.nodeMu.Unlock()
		switch {
		case apierrors.IsNotFound(err):
			return pool.Count{Unknown: fmt.Sprintf("calico-ipam: node %s is not in the API server", w.opts.Node)}
		case err != nil:
			return pool.Count{Unknown: fmt.Sprintf("calico-ipam: reading node %s's labels for the IP pools' nodeSelector: %v", w.opts.Node, err)}
		}
		return pool.Count{Unknown: fmt.Sprintf("calico-ipam: still reading node %s's labels", w.opts.Node)}
	}
	return s.count(scope)
}

// Syncing is true while Count cannot tell only because the first lists,
// or the first read of the node's labels, have not finished: not when one
// failed for a reason retrying does not cure (RBAC, a missing CRD or
// Node).
func (w *Watcher) Syncing() bool {
	for _, ww := range w.informers {
		if err := ww.lastErr(); err != nil && unknownFor(ww.what, err) != "" {
			return false
		}
	}
	w.nodeMu.Lock()
	labels, err := w.labels, w.nodeErr
	w.nodeMu.Unlock()
	if labels == nil {
		return !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err)
	}
	for _, ww := range w.informers {
		if !ww.inf.HasSynced() {
			return true
		}
	}
	return false
}

// unknownFor says what to do about an error reading a resource, or "" for
// one the reflector retries by itself.
func unknownFor(what string, err error) string {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("calico-ipam: the sidecar may not read %s: add deploy/components/calico, which grants it (%v)", what, err)
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("calico-ipam: %s is not served by the API server: is Calico installed with the Kubernetes datastore? (%v)", what, err)
	case errors.Is(err, context.Canceled):
		return ""
	}
	return ""
}

// snapshot copies what the informers hold.
func (w *Watcher) snapshot() *state {
	s := &state{node: w.opts.Node, now: w.now()}
	w.nodeMu.Lock()
	s.labels = w.labels
	w.nodeMu.Unlock()
	for _, obj := range w.informers[0].inf.GetStore().List() {
		if b, ok := obj.(*block); ok {
			s.blocks = append(s.blocks, b)
		}
	}
	for _, obj := range w.informers[1].inf.GetStore().List() {
		if a, ok := obj.(*affinity); ok {
			s.affinities = append(s.affinities, a)
		}
	}
	for _, obj := range w.informers[2].inf.GetStore().List() {
		if c, ok := obj.(*ipamConfig); ok && c.Name == "default" {
			s.config = c
		}
	}
	for _, obj := range w.informers[3].inf.GetStore().List() {
		if p, ok := obj.(*ipPool); ok {
			s.pools = append(s.pools, p)
		}
	}
	return s
}
