package conditions

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/netready/netready/pkg/publish"
)

// podInformer lists and watches this node's pods only (by field
// selector), and keeps of each only what the sidecar reads: managedFields
// are dropped, which is most of a pod object's memory.
func (c *Controller) podInformer() cache.SharedIndexInformer {
	selector := "spec.nodeName=" + c.opts.NodeName
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return c.client.ListPods(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return c.client.WatchPods(ctx, o)
		},
	}
	// As client-go's own informers do: a client that cannot stream lists
	// (a fake) says so, and the reflector lists instead.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, c.client), &corev1.Pod{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	// SetTransform fails only once the informer runs; it has not yet.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if pod, ok := obj.(*corev1.Pod); ok {
			pod.ManagedFields = nil
		}
		return obj, nil
	})
	return inf
}

// queueUnjudged queues the gated pods that no marker names: a stray
// unreadable marker that came or went changes what they should show.
func (c *Controller) queueUnjudged() {
	if c.pods == nil {
		return
	}
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return
	}
	for _, pod := range pods {
		if publish.Gated(pod, c.opts.ConditionType) && len(c.state.paths(pod.UID)) == 0 {
			c.queue.Add(pod.Namespace + "/" + pod.Name)
		}
	}
}

// SetOff tells the controller that the off switch is on (off) or not; a
// change judges every gated pod again, in Run's loop. Safe before Run and
// from any goroutine.
func (c *Controller) SetOff(off bool) {
	if !c.state.switched(off) {
		return
	}
	c.log.Warn("the off switch changed: judging every gated pod again", "off", off)
	select {
	case c.offChanged <- struct{}{}:
	default: // one is queued already
	}
}

// queueGated queues every gated pod of the node.
func (c *Controller) queueGated() {
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return
	}
	for _, pod := range pods {
		if publish.Gated(pod, c.opts.ConditionType) {
			c.queue.Add(pod.Namespace + "/" + pod.Name)
		}
	}
}

func (c *Controller) onPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !publish.Gated(pod, c.opts.ConditionType) {
		return
	}
	c.state.podSeen(pod.UID)
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		c.queue.Add(key)
	}
}

// onPodDeleted stops the re-checks of a deleted pod's markers; DEL or GC
// removes the markers themselves.
func (c *Controller) onPodDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.state.podGone(pod.UID, pod.Namespace+"/"+pod.Name)
	if err := forgetMemory(c.opts.StateDir, pod.UID); err != nil {
		c.log.Warn("cannot remove a deleted pod's memory; the next start sweeps it", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

// sweepMemory removes the memory of pods that left the node while the
// sidecar was down. The pod cache has synced.
func (c *Controller) sweepMemory() {
	onNode := map[types.UID]bool{}
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return
	}
	for _, pod := range pods {
		onNode[pod.UID] = true
	}
	if err := sweepMemory(c.opts.StateDir, func(uid types.UID) bool { return onNode[uid] }, c.now()); err != nil {
		c.log.Warn("sweep pod memory", "err", err)
	}
}
