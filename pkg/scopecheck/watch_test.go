package scopecheck

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/netready/netready/pkg/kubeapi"
)

// cluster is a WatchClient over objects the test changes, serving
// client-go's watch-list (initial events, then a bookmark) as the API
// server does; a resource in refuse answers Forbidden.
type cluster struct {
	mu       sync.Mutex
	objects  map[kubeapi.ScopeResource][]runtime.Object
	watchers map[kubeapi.ScopeResource]*watch.FakeWatcher
	refuse   map[kubeapi.ScopeResource]bool
	requests map[kubeapi.ScopeResource]int
	rv       int
}

func newCluster(objs ...runtime.Object) *cluster {
	c := &cluster{objects: map[kubeapi.ScopeResource][]runtime.Object{}, watchers: map[kubeapi.ScopeResource]*watch.FakeWatcher{},
		refuse: map[kubeapi.ScopeResource]bool{}, requests: map[kubeapi.ScopeResource]int{}}
	for _, o := range objs {
		r := resourceOf(o)
		c.objects[r] = append(c.objects[r], c.stamp(o))
	}
	return c
}

func resourceOf(o runtime.Object) kubeapi.ScopeResource {
	switch o.(type) {
	case *admissionv1.ValidatingAdmissionPolicy:
		return kubeapi.Policies
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		return kubeapi.PolicyBindings
	case *rbacv1.ClusterRole:
		return kubeapi.ClusterRoles
	}
	return kubeapi.ClusterRoleBindings
}

// stamp gives o the next resourceVersion.
func (c *cluster) stamp(o runtime.Object) runtime.Object {
	c.rv++
	m, _ := meta.Accessor(o)
	m.SetResourceVersion(strconv.Itoa(c.rv))
	return o
}

func (c *cluster) refused(r kubeapi.ScopeResource) error {
	c.requests[r]++
	if c.refuse[r] {
		return apierrors.NewForbidden(schema.GroupResource{Resource: string(r)}, "", io.EOF)
	}
	return nil
}

func (c *cluster) ListScope(_ context.Context, r kubeapi.ScopeResource, _ metav1.ListOptions) (runtime.Object, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refused(r); err != nil {
		return nil, err
	}
	lm := metav1.ListMeta{ResourceVersion: strconv.Itoa(c.rv)}
	switch r {
	case kubeapi.Policies:
		l := &admissionv1.ValidatingAdmissionPolicyList{ListMeta: lm}
		for _, o := range c.objects[r] {
			l.Items = append(l.Items, *o.(*admissionv1.ValidatingAdmissionPolicy))
		}
		return l, nil
	case kubeapi.PolicyBindings:
		l := &admissionv1.ValidatingAdmissionPolicyBindingList{ListMeta: lm}
		for _, o := range c.objects[r] {
			l.Items = append(l.Items, *o.(*admissionv1.ValidatingAdmissionPolicyBinding))
		}
		return l, nil
	case kubeapi.ClusterRoles:
		l := &rbacv1.ClusterRoleList{ListMeta: lm}
		for _, o := range c.objects[r] {
			l.Items = append(l.Items, *o.(*rbacv1.ClusterRole))
		}
		return l, nil
	}
	l := &rbacv1.ClusterRoleBindingList{ListMeta: lm}
	for _, o := range c.objects[r] {
		l.Items = append(l.Items, *o.(*rbacv1.ClusterRoleBinding))
	}
	return l, nil
}

func (c *cluster) WatchScope(_ context.Context, r kubeapi.ScopeResource, opts metav1.ListOptions) (watch.Interface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refused(r); err != nil {
		return nil, err
	}
	w := watch.NewFakeWithChanSize(len(c.objects[r])+100, false)
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		for _, o := range c.objects[r] {
			w.Add(o.DeepCopyObject())
		}
		end := newOf(r)
		m, _ := meta.Accessor(end)
		m.SetResourceVersion(strconv.Itoa(c.rv))
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		w.Action(watch.Bookmark, end)
	}
	c.watchers[r] = w
	return w, nil
}

func newOf(r kubeapi.ScopeResource) runtime.Object {
	for _, k := range kinds {
		if k.resource == r {
			return k.object.DeepCopyObject()
		}
	}
	return nil
}

// apply sends ev of o to the open watch of o's resource and keeps it.
func (c *cluster) apply(t *testing.T, ev watch.EventType, o runtime.Object) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	r := resourceOf(o)
	o = c.stamp(o)
	name := func(o runtime.Object) string { m, _ := meta.Accessor(o); return m.GetName() }
	kept := c.objects[r][:0]
	for _, old := range c.objects[r] {
		if name(old) != name(o) {
			kept = append(kept, old)
		}
	}
	if ev != watch.Deleted {
		kept = append(kept, o)
	}
	c.objects[r] = kept
	w := c.watchers[r]
	if w == nil {
		t.Fatalf("no watch of %s open", r)
	}
	w.Action(ev, o.DeepCopyObject())
}

func (c *cluster) set(r kubeapi.ScopeResource, refuse bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuse[r] = refuse
}

func (c *cluster) count(r kubeapi.ScopeResource) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests[r]
}

func startWatch(t *testing.T, c *cluster, retry time.Duration) *Watch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := NewWatch(c, watchSelf, retry, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	w.WaitFirst(wctx)
	return w
}

var watchSelf = Self{User: "system:serviceaccount:kube-system:netready-sidecar", Groups: []string{"system:serviceaccounts", "system:authenticated"}}

func vap(name string, resources ...string) *admissionv1.ValidatingAdmissionPolicy {
	return &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{MatchConstraints: rules([]admissionv1.OperationType{admissionv1.Update}, []string{"", "apps"}, resources),
			Validations: []admissionv1.Validation{{Expression: "false"}}}}
}

func vapb(name string) *admissionv1.ValidatingAdmissionPolicyBinding {
	return &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}
}

func role(name string, groups ...string) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: groups, Resources: []string{"sidecar-identity"}, Verbs: []string{"use"}}}}
}

func roleBinding(name, role string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: subjects}
}

// TestWatchSignalsWhatDecidesTheScope: after the first list, a change to
// an object that decides the scope signals, and a change to another, or
// to a part of one that decides nothing, does not.
func TestWatchSignalsWhatDecidesTheScope(t *testing.T) {
	sidecar := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "netready-sidecar"}
	masters := rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:masters"}
	c := newCluster(vap("x-netready-sidecar-scope", "pods/status"), vapb("x-netready-sidecar-scope"),
		vap("replicas", "deployments"), vapb("replicas"),
		role("netready-sidecar-identity", "netready.io"), roleBinding("netready-sidecar-identity", "netready-sidecar-identity", sidecar),
		role("view", "apps"))
	w := startWatch(t, c, time.Hour)
	if ok, synced := w.Watching(); !ok || synced.IsZero() {
		t.Fatalf("Watching() = %v, %v after the first list, want true since then", ok, synced)
	}
	relabelled := vap("x-netready-sidecar-scope", "pods/status")
	relabelled.Labels = map[string]string{"helm.sh/chart": "netready-0.7.0"}
	loosened := vap("x-netready-sidecar-scope", "pods/status")
	loosened.Spec.Validations[0].Expression = "true"
	steps := []struct {
		what   string
		ev     watch.EventType
		obj    runtime.Object
		signal bool
	}{
		{"netready's policy relabelled", watch.Modified, relabelled, false},
		{"netready's policy's validation changed", watch.Modified, loosened, true},
		{"the binding of a policy on Deployments deleted", watch.Deleted, vapb("replicas"), false},
		{"a policy on Deployments changed", watch.Modified, vap("replicas", "statefulsets"), false},
		{"netready's binding deleted", watch.Deleted, vapb("x-netready-sidecar-scope"), true},
		{"a new policy on pods/status", watch.Added, vap("acme-freeze", "pods/status"), true},
		{"a role in another group", watch.Added, role("deployer", "apps"), false},
		{"the identity's role loses its rule", watch.Modified, role("netready-sidecar-identity", "apps"), true},
		{"cluster-admin bound to system:masters", watch.Added, roleBinding("admins", "cluster-admin", masters), false},
		{"cluster-admin bound to every ServiceAccount", watch.Added, roleBinding("oops", "cluster-admin", rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:serviceaccounts"}), true},
		{"the identity binding deleted", watch.Deleted, roleBinding("netready-sidecar-identity", "netready-sidecar-identity", sidecar), true},
	}
	for _, s := range steps {
		c.apply(t, s.ev, s.obj)
		wait := 200 * time.Millisecond
		if s.signal {
			wait = 5 * time.Second
		}
		select {
		case <-w.Changed():
			if !s.signal {
				t.Errorf("%s: signalled a change", s.what)
			}
		case <-time.After(wait):
			if s.signal {
				t.Errorf("%s: no change signalled within %v", s.what, wait)
			}
		}
	}
}

// TestAWatchRefusedStopsAndIsRetried: RBAC refusing one list stops every
// watch and Watching says so; the watch is tried again only after Retry,
// and once allowed it is open again.
func TestAWatchRefusedStopsAndIsRetried(t *testing.T) {
	c := newCluster(vap("netready-sidecar-scope", "pods/status"))
	c.set(kubeapi.ClusterRoles, true)
	w := startWatch(t, c, 300*time.Millisecond)
	if ok, _ := w.Watching(); ok {
		t.Fatal("Watching() = true with clusterroles refused")
	}
	time.Sleep(time.Second)
	// 1 s at a retry every 300-330 ms: about 4 tries. client-go alone
	// would retry a refused list within 1 s once or twice, and then
	// every half minute or so.
	if n := c.count(kubeapi.ClusterRoles); n < 2 || n > 12 {
		t.Errorf("%d requests for clusterroles in 1 s with Retry 300 ms, want a few", n)
	}
	if ok, _ := w.Watching(); ok {
		t.Fatal("Watching() = true with clusterroles refused")
	}
	c.set(kubeapi.ClusterRoles, false)
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if ok, _ := w.Watching(); ok {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("Watching() still false 5 s after clusterroles were allowed")
		}
	}
}
