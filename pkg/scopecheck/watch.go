package scopecheck

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/netready/netready/pkg/kubeapi"
)

// WatchClient lists and watches what decides the scope; kubeapi.REST in
// production.
type WatchClient interface {
	ListScope(ctx context.Context, r kubeapi.ScopeResource, opts metav1.ListOptions) (runtime.Object, error)
	WatchScope(ctx context.Context, r kubeapi.ScopeResource, opts metav1.ListOptions) (watch.Interface, error)
}

// Trigger is what tells Keep to check before its clock does: Watch in
// production.
type Trigger interface {
	// Changed receives, coalesced, when something that decides the
	// scope changed.
	Changed() <-chan struct{}
	// Health receives, coalesced, when Watching's answer may have
	// changed.
	Health() <-chan struct{}
	// Watching says whether every watch is open, and since when its
	// informers have all been synced (a change before that is seen by
	// no event).
	Watching() (ok bool, synced time.Time)
}

// WatchTimeout is the shortest a watch of Watch's lasts before client-go
// opens it again (up to twice that): these objects rarely change, and
// every re-open is a request from every node.
const WatchTimeout = 30 * time.Minute

// kinds are the resources Watch follows, with how each is reduced to what
// decides the scope (decides.go).
var kinds = []struct {
	resource kubeapi.ScopeResource
	object   runtime.Object
	reduce   func(Self, any) any
}{
	{kubeapi.Policies, &admissionv1.ValidatingAdmissionPolicy{}, func(_ Self, o any) any { return reduceAs(o, reducePolicy) }},
	{kubeapi.PolicyBindings, &admissionv1.ValidatingAdmissionPolicyBinding{}, func(_ Self, o any) any { return reduceAs(o, reduceBinding) }},
	{kubeapi.ClusterRoles, &rbacv1.ClusterRole{}, func(_ Self, o any) any { return reduceAs(o, reduceRole) }},
	{kubeapi.ClusterRoleBindings, &rbacv1.ClusterRoleBinding{}, func(s Self, o any) any {
		return reduceAs(o, func(b *rbacv1.ClusterRoleBinding) *rbacv1.ClusterRoleBinding { return reduceRoleBinding(s, b) })
	}},
}

// reduceAs reduces o when it is a T, and leaves anything else (a
// tombstone) as it is.
func reduceAs[T any](o any, reduce func(T) T) any {
	if t, ok := o.(T); ok {
		return reduce(t)
	}
	return o
}

// Watch follows the ValidatingAdmissionPolicies, their bindings, the
// ClusterRoles and the ClusterRoleBindings, all of them (a kustomize
// namePrefix renames netready's), with client-go informers that never
// resync, and tells Keep when one that decides the scope changed. RBAC
// that refuses a list or a watch (an install from before it) stops every
// watch, and Watching says so, until Retry has passed: a refused request
// would otherwise be retried by every node every minute or so.
type Watch struct {
	client WatchClient
	self   Self
	retry  time.Duration
	log    *slog.Logger

	changed, health chan struct{}
	// first is closed once the informers first synced, or a request
	// was refused.
	first     chan struct{}
	firstOnce sync.Once

	mu       sync.Mutex
	opened   map[kubeapi.ScopeResource]bool // the last list or watch of each opened
	synced   []cache.InformerSynced         // the running informers' (nil when none run)
	syncedAt time.Time                      // when they all first synced
	policies cache.Store
}

// NewWatch makes the watch for self; Run runs it.
func NewWatch(client WatchClient, self Self, retry time.Duration, log *slog.Logger) *Watch {
	return &Watch{client: client, self: self, retry: retry, log: log,
		changed: make(chan struct{}, 1), health: make(chan struct{}, 1), first: make(chan struct{}),
		opened: map[kubeapi.ScopeResource]bool{}}
}

func (w *Watch) Changed() <-chan struct{} { return w.changed }
func (w *Watch) Health() <-chan struct{}  { return w.health }

func (w *Watch) Watching() (bool, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.synced == nil || w.syncedAt.IsZero() {
		return false, time.Time{}
	}
	for _, k := range kinds {
		if !w.opened[k.resource] {
			return false, w.syncedAt
		}
	}
	return true, w.syncedAt
}

// WaitFirst waits until the informers first synced, or a request was
// refused, or ctx ends, so that the first check follows the first list.
func (w *Watch) WaitFirst(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-w.first:
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run follows until ctx ends, starting again Retry after a refusal.
func (w *Watch) Run(ctx context.Context) {
	for {
		err := w.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		w.firstOnce.Do(func() { close(w.first) })
		w.log.Warn("cannot watch what decides the sidecar's scope, so it is re-checked on the short clock (--scope-recheck-unwatched); give the sidecar's ClusterRole list and watch on validatingadmissionpolicies, validatingadmissionpolicybindings, clusterroles and clusterrolebindings, as deploy/ does",
			"err", err, "retryIn", w.retry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.retry + rand.N(w.retry/10+1)):
		}
	}
}

// follow runs an informer of each kind until ctx ends or a request is
// refused, and returns why.
func (w *Watch) follow(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	refused := make(chan error, 1)
	var synced []cache.InformerSynced
	var policies cache.Store
	for _, k := range kinds {
		store, ctl := cache.NewInformerWithOptions(cache.InformerOptions{
			ListerWatcher:   w.listWatch(k.resource, refused),
			ObjectType:      k.object,
			Handler:         w.handler(),
			MinWatchTimeout: WatchTimeout,
			Transform:       func(o any) (any, error) { return k.reduce(w.self, o), nil },
		})
		if k.resource == kubeapi.Policies {
			policies = store
		}
		synced = append(synced, ctl.HasSynced)
		go ctl.RunWithContext(ctx)
	}
	w.mu.Lock()
	w.synced, w.syncedAt, w.policies = synced, time.Time{}, policies
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.synced, w.syncedAt, w.policies = nil, time.Time{}, nil
		w.opened = map[kubeapi.ScopeResource]bool{}
		w.mu.Unlock()
		signal(w.health)
	}()
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), synced...) {
			w.mu.Lock()
			w.syncedAt = time.Now()
			w.mu.Unlock()
			w.firstOnce.Do(func() { close(w.first) })
			signal(w.health)
		}
	}()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-refused:
		return err
	}
}

// isRefusal says whether err is the API server's lasting no: RBAC, or a
// resource it does not serve.
func isRefusal(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err)
}

// listWatch reads r, noting whether each list or watch opened.
func (w *Watch) listWatch(r kubeapi.ScopeResource, refused chan<- error) *cache.ListWatch {
	opened := func(err error) {
		w.mu.Lock()
		was := w.opened[r]
		w.opened[r] = err == nil
		w.mu.Unlock()
		if was != (err == nil) {
			signal(w.health)
		}
		if err != nil && isRefusal(err) {
			select {
			case refused <- fmt.Errorf("%s: %w", r, err):
			default:
			}
		}
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list, err := w.client.ListScope(ctx, r, o)
			opened(err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			wi, err := w.client.WatchScope(ctx, r, o)
			opened(err)
			return wi, err
		},
	}
}

// handler signals a change to what decides the scope, after the first
// list: an object that decides it added or deleted, or its deciding part
// changed.
func (w *Watch) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(o any, initial bool) {
			if !initial && decides(o, w.policy) {
				signal(w.changed)
			}
		},
		UpdateFunc: func(old, o any) {
			if !equality.Semantic.DeepEqual(part(old), part(o)) && (decides(old, w.policy) || decides(o, w.policy)) {
				signal(w.changed)
			}
		},
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if decides(o, w.policy) {
				signal(w.changed)
			}
		},
	}
}

// policy is the reduced policy named name, nil when there is none.
func (w *Watch) policy(name string) *admissionv1.ValidatingAdmissionPolicy {
	w.mu.Lock()
	store := w.policies
	w.mu.Unlock()
	if store == nil {
		return nil
	}
	o, ok, err := store.GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	p, _ := o.(*admissionv1.ValidatingAdmissionPolicy)
	return p
}
