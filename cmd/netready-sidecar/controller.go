package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/pending"
	"github.com/netready/netready/pkg/publish"
)

// Retries back off from retryMin to retryMax per marker, so that an API
// server outage neither spins nor delays the catch-up by more than
// retryMax once it is back.
const (
	retryMin     = 200 * time.Millisecond
	retryMax     = 10 * time.Second
	recheckRound = 5 * time.Second
	apiTimeout   = 10 * time.Second
)

// controller publishes markers as pod conditions. Its lock guards only its
// maps; no wait or API call happens under it.
type controller struct {
	opts    options
	client  kubernetes.Interface
	log     *slog.Logger
	metrics *metrics
	store   marker.Store
	queue   workqueue.TypedRateLimitingInterface[string]
	pods    corelisters.PodLister
	ready   atomic.Bool

	mu       sync.Mutex
	logged   map[string]string             // marker path -> last note logged
	byPod    map[types.UID]map[string]bool // pod -> marker paths
	checking map[string]context.CancelFunc // pending re-checks
	progress map[string]*marker.Marker     // their latest reasons
	observed map[string]string             // marker path -> state whose wait was observed
}

func newController(o options, client kubernetes.Interface, log *slog.Logger, m *metrics) *controller {
	return &controller{
		opts: o, client: client, log: log, metrics: m,
		store: marker.Store{Dir: o.StateDir},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryMin, retryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "markers"}),
		logged: map[string]string{}, byPod: map[types.UID]map[string]bool{},
		checking: map[string]context.CancelFunc{}, progress: map[string]*marker.Marker{},
		observed: map[string]string{},
	}
}

func (c *controller) mux(metricsHandler http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !c.ready.Load() {
			http.Error(w, "pod cache not synced or markers not read yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// run watches markers and this node's pods until ctx ends.
func (c *controller) run(ctx context.Context) error {
	defer c.queue.ShutDown()
	if err := os.MkdirAll(c.opts.StateDir, 0o755); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(c.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + c.opts.NodeName }))
	podInformer := factory.Core().V1().Pods()
	c.pods = podInformer.Lister()
	// A pod that appears or changes may be one a marker waits for.
	podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueuePod(obj) },
		UpdateFunc: func(_, obj any) { c.enqueuePod(obj) },
	})
	factory.Start(ctx.Done())

	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer w.Close()
	if err := w.Add(c.opts.StateDir); err != nil {
		return fmt.Errorf("watch %s: %w", c.opts.StateDir, err)
	}
	c.log.Info("waiting for the pod cache", "node", c.opts.NodeName)
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		return ctx.Err()
	}
	// Watch first, then read everything: nothing written in between is lost.
	c.scan(w)
	c.ready.Store(true)
	c.log.Info("publishing markers", "stateDir", c.opts.StateDir, "condition", c.opts.ConditionType)

	var wg sync.WaitGroup
	for i := 0; i < c.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.work(ctx) {
			}
		}()
	}
	resync := time.NewTicker(c.opts.Resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			c.queue.ShutDown()
			wg.Wait()
			c.stopAllChecks()
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("inotify watch closed")
			}
			c.onEvent(w, ev)
		case err := <-w.Errors:
			// Lost events: read everything again.
			c.log.Warn("inotify", "err", err)
			c.scan(w)
		case <-resync.C:
			c.scan(w)
		}
	}
}

// scan watches every network folder and queues every marker.
func (c *controller) scan(w *fsnotify.Watcher) {
	nets, err := os.ReadDir(c.opts.StateDir)
	if err != nil {
		c.log.Warn("read state dir", "err", err)
		return
	}
	for _, n := range nets {
		if !n.IsDir() {
			continue
		}
		dir := filepath.Join(c.opts.StateDir, n.Name())
		w.Add(dir)
		files, _ := os.ReadDir(dir)
		for _, f := range files {
			if isMarker(f.Name()) {
				c.queue.Add(filepath.Join(dir, f.Name()))
			}
		}
	}
}

func isMarker(name string) bool {
	return strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, ".")
}

func (c *controller) onEvent(w *fsnotify.Watcher, ev fsnotify.Event) {
	if filepath.Dir(ev.Name) == filepath.Clean(c.opts.StateDir) {
		if info, err := os.Stat(ev.Name); err == nil && info.IsDir() {
			c.scan(w) // a new network folder
		}
		return
	}
	if isMarker(filepath.Base(ev.Name)) {
		c.queue.Add(ev.Name)
	}
}

func (c *controller) enqueuePod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.mu.Lock()
	paths := c.byPod[pod.UID]
	var todo []string
	for p := range paths {
		todo = append(todo, p)
	}
	c.mu.Unlock()
	for _, p := range todo {
		c.queue.Add(p)
	}
}

// work handles one marker; false once the queue is shut down.
func (c *controller) work(ctx context.Context) bool {
	path, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(path)
	if err := c.process(ctx, path); err != nil {
		c.log.Warn("publish failed; will retry", "marker", path, "err", err, "retries", c.queue.NumRequeues(path))
		c.queue.AddRateLimited(path)
		return true
	}
	c.queue.Forget(path)
	return true
}

// note logs a marker's situation once, not on every pass.
func (c *controller) note(path, msg string, args ...any) {
	c.mu.Lock()
	seen := c.logged[path] == msg
	c.logged[path] = msg
	c.mu.Unlock()
	if !seen {
		c.log.Info(msg, append([]any{"marker", path}, args...)...)
	}
}

// process publishes one marker's condition if the pod does not show it.
// An error means: try again later.
func (c *controller) process(ctx context.Context, path string) error {
	m, err := marker.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		c.forget(path)
		return nil
	}
	if err != nil {
		c.note(path, "unreadable marker; leaving it for GC", "err", err)
		return nil
	}
	if m.Pod.Name == "" || m.Pod.Namespace == "" || m.Pod.UID == "" {
		c.note(path, "marker names no Kubernetes pod; nothing to publish")
		return nil
	}
	uid := types.UID(m.Pod.UID)
	c.mu.Lock()
	if c.byPod[uid] == nil {
		c.byPod[uid] = map[string]bool{}
	}
	c.byPod[uid][path] = true
	c.mu.Unlock()

	pod, err := c.pods.Pods(m.Pod.Namespace).Get(m.Pod.Name)
	switch {
	case apierrors.IsNotFound(err):
		c.note(path, "no such pod on this node; leaving the marker for GC", "pod", m.Pod.Namespace+"/"+m.Pod.Name)
		return nil
	case err != nil:
		return err
	case pod.UID != uid:
		c.note(path, "the pod was recreated; this marker is for the old one, not publishing", "pod", m.Pod.Namespace+"/"+m.Pod.Name,
			"markerUID", uid, "podUID", pod.UID)
		return nil
	}
	c.observeWait(path, m)
	if m.State == marker.StatePending {
		c.startCheck(path, m)
		c.mu.Lock()
		if p := c.progress[path]; p != nil && p.CreatedAt.Equal(m.CreatedAt.Time) {
			m = p
		}
		c.mu.Unlock()
	} else {
		c.stopCheck(path)
	}

	want := publish.Desired(m, c.opts.ConditionType)
	cur := publish.Current(pod, c.opts.ConditionType)
	if publish.Shows(cur, want) {
		return nil
	}
	cond := publish.WithTransition(want, cur, time.Now())
	patch, err := publish.Patch(pod.UID, cond)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	_, err = c.client.CoreV1().Pods(pod.Namespace).Patch(actx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case err == nil:
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		// UID precondition failed or the pod is gone: never ours again.
		c.metrics.apiErrors.WithLabelValues(string(apierrors.ReasonForError(err))).Inc()
		c.note(path, "the pod changed under the marker; not publishing", "err", err)
		return nil
	default:
		c.metrics.apiErrors.WithLabelValues(reason(err)).Inc()
		return err
	}
	c.metrics.published.WithLabelValues(string(cond.Status)).Inc()
	if info, err := os.Stat(path); err == nil {
		c.metrics.publishLatency.Observe(time.Since(info.ModTime()).Seconds())
	}
	c.log.Info("published", "pod", pod.Namespace+"/"+pod.Name, "status", cond.Status, "reason", cond.Reason, "message", cond.Message)
	return nil
}

func reason(err error) string {
	if r := apierrors.ReasonForError(err); r != metav1.StatusReasonUnknown {
		return string(r)
	}
	return "Unreachable"
}

// observeWait records each marker state's wait once.
func (c *controller) observeWait(path string, m *marker.Marker) {
	c.mu.Lock()
	seen := c.observed[path] == m.State+m.CreatedAt.String()
	c.observed[path] = m.State + m.CreatedAt.String()
	c.mu.Unlock()
	if !seen {
		c.metrics.markerWait.WithLabelValues(m.State).Observe(float64(m.WaitedMs) / 1000)
	}
}

// startCheck goes on with a pending marker's checks, once per marker.
func (c *controller) startCheck(path string, m *marker.Marker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, running := c.checking[path]; running {
		return
	}
	deadline := m.CreatedAt.Add(c.opts.PendingTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	c.checking[path] = cancel
	c.metrics.pending.Set(float64(len(c.checking)))
	go func() {
		defer cancel()
		_, err := pending.Recheck(ctx, c.store, m, recheckRound, func(p *marker.Marker) {
			c.mu.Lock()
			c.progress[path] = p
			c.mu.Unlock()
			c.queue.Add(path)
		})
		switch {
		case err == nil:
			c.log.Info("pending attachment is now programmed", "marker", path)
		case errors.Is(err, context.DeadlineExceeded):
			c.note(path, "gave up re-checking a pending attachment", "after", c.opts.PendingTimeout)
		case !errors.Is(err, context.Canceled):
			c.note(path, "stopped re-checking a pending attachment", "err", err)
		}
		c.queue.Add(path)
	}()
}

func (c *controller) stopCheck(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cancel, ok := c.checking[path]; ok {
		cancel()
		delete(c.checking, path)
		c.metrics.pending.Set(float64(len(c.checking)))
	}
	delete(c.progress, path)
}

func (c *controller) stopAllChecks() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, cancel := range c.checking {
		cancel()
		delete(c.checking, p)
	}
}

// forget drops what is known of a removed marker.
func (c *controller) forget(path string) {
	c.stopCheck(path)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.logged, path)
	delete(c.observed, path)
	for uid, paths := range c.byPod {
		delete(paths, path)
		if len(paths) == 0 {
			delete(c.byPod, uid)
		}
	}
}
