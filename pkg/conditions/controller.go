// Package conditions keeps the readiness condition of every gated pod on
// this node true to the pod's markers: it follows the markers (inotify and
// a resync) and the node's pods (an informer), publishes through
// pkg/publish, re-checks attachments whose ADD gave up waiting, and counts
// each ADD's outcome.
package conditions

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/netready/netready/pkg/health"
	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/outcome"
	"github.com/netready/netready/pkg/pending"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/pkg/status"
)

// Retries back off from retryMin to retryMax per pod, so that an API
// server outage neither spins nor delays the catch-up by more than
// retryMax once it is back.
const (
	retryMin     = 200 * time.Millisecond
	retryMax     = 10 * time.Second
	recheckRound = 5 * time.Second
	recheckMax   = time.Minute
	// unreadableRetry is how often markers that exist but cannot be read
	// are read again: an I/O error or EMFILE brings no inotify event when
	// it clears.
	unreadableRetry = 5 * time.Second
	// A patch the API server refuses for good (a policy's 403, a 422) is
	// sent again after refusedMin, then four times as long each time up
	// to refusedMax (5 s, 20 s, 80 s, 320 s, 10 min): a node of refused
	// pods costs one request per pod per refusedMax, not ten a second.
	// The first retry comes soon because a restarting API server answers
	// 403 until its RBAC cache is filled (TestSidecar's restart subtest
	// saw it for about five seconds).
	refusedMin    = 5 * time.Second
	refusedGrowth = 4
	refusedMax    = 10 * time.Minute
	// messageEvery: a condition whose status and reason stay the same is
	// rewritten for its message alone at most this often. A pending
	// check's reason may change on every probe (an ephemeral port, an
	// agent's revision), and each rewrite is an API write.
	messageEvery = 30 * time.Second
)

// What to do with gated pods that have no marker (Config.Unobserved).
const (
	UnobservedReady    = "ready"
	UnobservedNotReady = "notready"
)

// Config is what the controller is told.
type Config struct {
	StateDir      string // the plugin's stateDir, where markers are
	NodeName      string
	ConditionType string
	// PendingTimeout: how long after ADD a pending attachment is
	// re-checked at full pace.
	PendingTimeout time.Duration
	Resync         time.Duration // every marker is read again this often
	Workers        int           // pods published in parallel
	// UnobservedGrace: how long a gated pod's sandbox may be up with no
	// marker before it counts as not observed; Unobserved says what
	// then.
	UnobservedGrace time.Duration
	Unobserved      string
}

// rechecker goes on with a pending marker's checks; pending.Recheck in
// production.
type rechecker func(ctx context.Context, store marker.Store, m *marker.Marker, s pending.Schedule, progress func(*marker.Marker)) (*marker.Marker, error)

// Controller publishes one condition per gated pod of this node, computed
// from all of the pod's markers. Its work queue holds pod keys
// (namespace/name). Its lock guards only its maps; no wait or API call
// happens under it.
type Controller struct {
	opts     Config
	client   kubeapi.Client
	log      *slog.Logger
	metrics  *metrics.Metrics
	store    marker.Store
	queue    workqueue.TypedRateLimitingInterface[string]
	pods     corelisters.PodLister
	recorder kubeapi.EventRecorder
	recheck  rechecker
	read     func(path string) (*marker.Marker, error)
	now      func() time.Time
	// retryEvery is how often unreadable markers are read again.
	retryEvery time.Duration
	ready      atomic.Bool

	mu       sync.Mutex
	logged   map[string]string             // marker path or pod key -> last note logged
	markers  map[string]markerRef          // marker path -> the pod it names
	byUID    map[types.UID]map[string]bool // pod UID -> marker paths
	checking map[string]*recheckState      // pending re-checks, by marker path
	progress map[string]*marker.Marker     // their latest reasons
	observed map[string]string             // marker path -> state whose wait was observed
	// addSeen holds, per marker path, the ADD (its start) already counted
	// in netready_add_wait_seconds; ADDs that began before started are
	// not counted (a restart would count them twice).
	addSeen map[string]time.Time
	started time.Time
	// journals follow each network's outcome journal; the main loop alone
	// uses them.
	journals map[string]*outcome.Reader
	// configNotes: network -> the message of its refused entry.
	configNotes map[string]string
	scanned     bool
	sent        map[types.UID]sentCondition // what was last patched, per pod
	// unreadable holds markers that exist but could not be read, with
	// why. One that is also in markers keeps its pod not ready; one that
	// is not (never read) may be any new pod's, so no pod is judged
	// NotObserved while it stays.
	unreadable map[string]error
	// refused holds pods whose patch the API server refused for good.
	refused map[types.UID]refusal
	// gated holds this node's pods with the readiness gate (gates are
	// immutable), for netready_gated_pods.
	gated map[types.UID]bool
}

// refusal is a pod's condition patch that the API server refused for good.
// The same condition is not sent again before until; another one is.
type refusal struct {
	want    corev1.PodCondition
	until   time.Time
	backoff time.Duration
}

// sentCondition is a patch the pod cache may not show yet: while the cached
// pod is still at baseRV, the cache predates the patch.
type sentCondition struct {
	baseRV string
	cond   corev1.PodCondition
	at     time.Time
	// basis names the marker files (and read errors) cond came from.
	basis string
}

// recheckState is one pending marker's re-check. A re-check that ended
// stays, done, so that it is not started again for the same marker (a pod
// whose netns is gone would otherwise restart it in a loop).
type recheckState struct {
	created time.Time
	cancel  context.CancelFunc
	done    bool
}

// markerRef is what the Controller remembers of a marker file.
type markerRef struct {
	podKey string
	uid    types.UID
}

// New returns the controller of cfg.NodeName's pods; Run runs it.
func New(o Config, client kubeapi.Client, recorder kubeapi.EventRecorder, log *slog.Logger, m *metrics.Metrics) *Controller {
	return &Controller{
		opts: o, client: client, log: log, metrics: m, recorder: recorder,
		store: marker.Store{Dir: o.StateDir},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryMin, retryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"}),
		recheck: pending.Recheck,
		read:    marker.ReadFile,
		now:     time.Now, retryEvery: unreadableRetry,
		logged: map[string]string{}, markers: map[string]markerRef{}, byUID: map[types.UID]map[string]bool{},
		checking: map[string]*recheckState{}, progress: map[string]*marker.Marker{},
		observed: map[string]string{}, sent: map[types.UID]sentCondition{},
		addSeen: map[string]time.Time{}, started: time.Now(), journals: map[string]*outcome.Reader{}, configNotes: map[string]string{},
		unreadable: map[string]error{}, refused: map[types.UID]refusal{}, gated: map[types.UID]bool{},
	}
}

// Mux serves /metrics, /healthz (h) and /readyz (the pod cache synced and
// nothing h waits for).
func (c *Controller) Mux(metricsHandler http.Handler, h *health.Health) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler)
	mux.Handle("/healthz", h)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !c.ready.Load() {
			http.Error(w, "pod cache not synced or markers not read yet", http.StatusServiceUnavailable)
			return
		}
		if why := h.UnreadyReason(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// run watches markers and this node's pods until ctx ends.
// Run publishes until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	if err := os.MkdirAll(c.opts.StateDir, 0o755); err != nil {
		return err
	}
	informer := c.podInformer()
	c.pods = corelisters.NewPodLister(informer.GetIndexer())
	informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onPod,
		UpdateFunc: func(_, obj any) { c.onPod(obj) },
		DeleteFunc: c.onPodDeleted,
	})
	go informer.Run(ctx.Done())

	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer w.Close()
	if err := w.Add(c.opts.StateDir); err != nil {
		return fmt.Errorf("watch %s: %w", c.opts.StateDir, err)
	}
	c.log.Info("waiting for the pod cache", "node", c.opts.NodeName)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	// Watch first, then read everything: nothing written in between is
	// lost. Workers start only now, so that no pod is judged before all
	// markers are known.
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
	retry := time.NewTicker(c.retryEvery)
	defer retry.Stop()
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
		case <-retry.C:
			for _, path := range c.unreadablePaths() {
				c.onMarker(path)
			}
		}
	}
}

// podInformer lists and watches this node's pods only (by field
// selector), and keeps of each only what the sidecar reads: managedFields
// are dropped, which is most of a pod object's memory.
func (c *Controller) podInformer() cache.SharedIndexInformer {
	selector := "spec.nodeName=" + c.opts.NodeName
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return c.client.ListPods(context.Background(), o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return c.client.WatchPods(context.Background(), o)
		},
	}
	// As client-go's own informers do: a client that cannot stream lists
	// (a fake) says so, and the reflector lists instead.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, c.client), &corev1.Pod{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	inf.SetTransform(func(obj any) (any, error) {
		if pod, ok := obj.(*corev1.Pod); ok {
			pod.ManagedFields = nil
		}
		return obj, nil
	})
	return inf
}

// scan watches every network folder and reads every marker. Markers it
// knows of that a folder read no longer shows (removed while inotify
// events were lost) are read again, which forgets them.
func (c *Controller) scan(w *fsnotify.Watcher) {
	nets, err := os.ReadDir(c.opts.StateDir)
	if err != nil {
		c.log.Warn("read state dir", "err", err)
		return
	}
	seen, listed := map[string]bool{}, map[string]bool{}
	for _, n := range nets {
		if !n.IsDir() {
			continue
		}
		dir := filepath.Join(c.opts.StateDir, n.Name())
		w.Add(dir)
		files, err := os.ReadDir(dir)
		if err != nil {
			c.log.Warn("read network folder", "dir", dir, "err", err)
			continue
		}
		listed[dir] = true
		c.readJournal(dir)
		c.readConfigNote(dir)
		for _, f := range files {
			if isMarker(f.Name()) {
				path := filepath.Join(dir, f.Name())
				seen[path] = true
				c.onMarker(path)
			}
		}
	}
	c.scanned = true
	for _, path := range c.knownPaths() {
		if !seen[path] && (listed[filepath.Dir(path)] || !slices.ContainsFunc(nets, func(e os.DirEntry) bool {
			return filepath.Join(c.opts.StateDir, e.Name()) == filepath.Dir(path)
		})) {
			c.onMarker(path)
		}
	}
}

// knownPaths lists every marker the Controller holds something of.
func (c *Controller) knownPaths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	paths := slices.Collect(maps.Keys(c.markers))
	for p := range c.unreadable {
		if _, ok := c.markers[p]; !ok {
			paths = append(paths, p)
		}
	}
	return paths
}

func (c *Controller) unreadablePaths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Keys(c.unreadable))
}

func isMarker(name string) bool {
	return strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, ".")
}

func (c *Controller) onEvent(w *fsnotify.Watcher, ev fsnotify.Event) {
	if filepath.Dir(ev.Name) == filepath.Clean(c.opts.StateDir) {
		if info, err := os.Stat(ev.Name); err == nil && info.IsDir() {
			c.scan(w) // a new network folder
		}
		return
	}
	switch base := filepath.Base(ev.Name); {
	case isMarker(base):
		c.onMarker(ev.Name)
	case base == outcome.FileName:
		c.readJournal(filepath.Dir(ev.Name))
	case base == status.InvalidConfigFile:
		c.readConfigNote(filepath.Dir(ev.Name))
	}
}

// onMarker indexes a marker by its pod's UID and queues the pod. A marker
// that is gone is dropped from the index, and its pod queued so that its
// condition is computed again. One that exists but cannot be read stays
// indexed as it was, keeps its pod not ready, and is read again every
// unreadableRetry.
func (c *Controller) onMarker(path string) {
	m, err := c.read(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		stray := c.readable(path)
		if ref, ok := c.forget(path); ok {
			c.queue.Add(ref.podKey)
		} else if stray {
			c.queueUnjudged()
		}
		return
	case err != nil:
		c.note(path, "unreadable marker; its pod is kept not ready while it stays so, retrying", "err", err)
		c.mu.Lock()
		c.unreadable[path] = err
		ref, ok := c.markers[path]
		c.mu.Unlock()
		if ok {
			c.queue.Add(ref.podKey)
		} else {
			c.queueUnjudged()
		}
		return
	}
	if c.readable(path) {
		defer c.queueUnjudged()
	}
	c.countADD(path, m)
	if m.Pod.Name == "" || m.Pod.Namespace == "" || m.Pod.UID == "" {
		c.note(path, "marker names no Kubernetes pod; nothing to publish")
		return
	}
	ref := markerRef{podKey: m.Pod.Namespace + "/" + m.Pod.Name, uid: types.UID(m.Pod.UID)}
	c.mu.Lock()
	if old, ok := c.markers[path]; ok && old.uid != ref.uid {
		c.unindexLocked(path)
	}
	c.markers[path] = ref
	if c.byUID[ref.uid] == nil {
		c.byUID[ref.uid] = map[string]bool{}
	}
	c.byUID[ref.uid][path] = true
	c.mu.Unlock()
	c.queue.Add(ref.podKey)
}

// readable clears path from the unreadable markers, and reports whether
// it was one that named no known pod.
func (c *Controller) readable(path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, was := c.unreadable[path]
	_, known := c.markers[path]
	delete(c.unreadable, path)
	return was && !known
}

// strays are the unreadable markers that name no known pod.
func (c *Controller) strays() []publish.Unreadable {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []publish.Unreadable
	for p, err := range c.unreadable {
		if _, ok := c.markers[p]; !ok {
			out = append(out, publish.Unreadable{Path: p, Err: err})
		}
	}
	return out
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
		if publish.Gated(pod, c.opts.ConditionType) && len(c.markerPaths(pod.UID)) == 0 {
			c.queue.Add(pod.Namespace + "/" + pod.Name)
		}
	}
}

func (c *Controller) onPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !publish.Gated(pod, c.opts.ConditionType) {
		return
	}
	c.mu.Lock()
	c.gated[pod.UID] = true
	c.metrics.GatedPods.Set(float64(len(c.gated)))
	c.mu.Unlock()
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
	for _, path := range c.markerPaths(pod.UID) {
		c.stopCheck(path)
	}
	c.mu.Lock()
	delete(c.sent, pod.UID)
	delete(c.logged, pod.Namespace+"/"+pod.Name)
	delete(c.refused, pod.UID)
	c.metrics.RefusedPods.Set(float64(len(c.refused)))
	delete(c.gated, pod.UID)
	c.metrics.GatedPods.Set(float64(len(c.gated)))
	c.mu.Unlock()
}

// work handles one pod; false once the queue is shut down.
func (c *Controller) work(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if err := c.process(ctx, key); err != nil {
		c.log.Warn("publish failed; will retry", "pod", key, "err", err, "retries", c.queue.NumRequeues(key))
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// note logs a situation once, not on every pass.
func (c *Controller) note(key, msg string, args ...any) {
	c.mu.Lock()
	seen := c.logged[key] == msg
	c.logged[key] = msg
	c.mu.Unlock()
	if !seen {
		c.log.Info(msg, append([]any{"key", key}, args...)...)
	}
}

// process publishes one pod's condition if the pod does not show it yet.
// An error means: try again later.
func (c *Controller) process(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.pods.Pods(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	c.noteRecreated(pod)
	if !publish.Gated(pod, c.opts.ConditionType) {
		// Out of scope: its markers stay on disk for CHECK, untouched.
		for _, path := range c.markerPaths(pod.UID) {
			c.stopCheck(path)
		}
		return nil
	}
	want, basis, ok := c.desired(pod)
	if !ok {
		return nil
	}
	cur := publish.Current(pod, c.opts.ConditionType)
	if publish.Shows(cur, want) || c.alreadySent(pod, want) {
		return nil
	}
	if wait, ok := c.messageOnlyTooSoon(pod.UID, cur, want, basis); ok {
		c.queue.AddAfter(key, wait)
		return nil
	}
	if wait, ok := c.stillRefused(pod.UID, want); ok {
		c.queue.AddAfter(key, wait)
		return nil
	}
	cond := publish.WithTransition(want, cur, c.now())
	patch, err := publish.Patch(pod.UID, cond)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, kubeapi.Timeout)
	defer cancel()
	err = c.client.PatchPodStatus(actx, pod.Namespace, pod.Name, types.StrategicMergePatchType, patch)
	switch {
	case err == nil:
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), uidMismatch(err):
		// UID precondition failed or the pod is gone: never ours again.
		c.metrics.APIErrors.WithLabelValues(string(apierrors.ReasonForError(err))).Inc()
		c.note(key, "the pod changed under us; not publishing", "err", err)
		return nil
	case refusedForGood(err):
		c.metrics.APIErrors.WithLabelValues(kubeapi.Reason(err)).Inc()
		c.queue.AddAfter(key, c.refuse(pod, want, err))
		return nil
	default:
		c.metrics.APIErrors.WithLabelValues(kubeapi.Reason(err)).Inc()
		return err
	}
	c.mu.Lock()
	c.sent[pod.UID] = sentCondition{baseRV: pod.ResourceVersion, cond: cond, at: c.now(), basis: basis}
	if _, ok := c.refused[pod.UID]; ok {
		delete(c.refused, pod.UID)
		c.metrics.RefusedPods.Set(float64(len(c.refused)))
	}
	c.mu.Unlock()
	c.metrics.Published.WithLabelValues(string(cond.Status)).Inc()
	c.observeLatency(pod.UID, want)
	if ev, ok := publish.EventFor(cur, want); ok && c.recorder != nil {
		c.recorder.Eventf(pod, nil, ev.Type, ev.Reason, "PublishCondition", "%s", ev.Note)
	}
	c.log.Info("published", "pod", key, "status", cond.Status, "reason", cond.Reason, "message", cond.Message)
	return nil
}

// refusedForGood reports whether the API server will refuse the same patch
// again whatever the timing: an admission policy or RBAC (403), or a patch
// it finds invalid (422, 400).
func refusedForGood(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// uidMismatch reports whether a patch was refused because the pod's UID is
// not the one the patch names (the pod was recreated under its name). The
// API server answers that with 409, or with 422 on metadata.uid.
func uidMismatch(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, cause := range status.Status().Details.Causes {
		if cause.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// refuse records that the API server refused pod's patch for good, and
// returns when to try again. The first refusal of a pod gets a Warning
// Event; later ones only count.
func (c *Controller) refuse(pod *corev1.Pod, want corev1.PodCondition, err error) time.Duration {
	c.mu.Lock()
	r, again := c.refused[pod.UID]
	r.backoff = min(max(refusedGrowth*r.backoff, refusedMin), refusedMax)
	r.want, r.until = want, c.now().Add(r.backoff)
	c.refused[pod.UID] = r
	c.metrics.RefusedPods.Set(float64(len(c.refused)))
	c.mu.Unlock()
	c.metrics.Refused.WithLabelValues(kubeapi.Reason(err)).Inc()
	c.log.Warn("the API server refused the condition; not sending it again for a while", "pod", pod.Namespace+"/"+pod.Name, "err", err, "retryAfter", r.backoff)
	if !again && c.recorder != nil {
		c.recorder.Eventf(pod, nil, corev1.EventTypeWarning, publish.ReasonPublishRefused, "PublishCondition",
			"the API server refused condition %s (%v); netready sends it again in %s, backing off to %s. Check the admission policies, netready-settings and the sidecar's RBAC",
			c.opts.ConditionType, err, r.backoff, refusedMax)
	}
	return r.backoff
}

// stillRefused reports whether want was refused for pod and its backoff
// has not run out, with how long is left.
func (c *Controller) stillRefused(uid types.UID, want corev1.PodCondition) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.refused[uid]
	if !ok || !publish.Shows(&r.want, want) {
		return 0, false
	}
	left := r.until.Sub(c.now())
	return left, left > 0
}

// messageOnlyTooSoon reports whether want differs from what the pod shows
// only in a message from re-check progress (same status, reason and marker
// files), and this sidecar patched the pod less than messageEvery ago;
// with how long to wait.
func (c *Controller) messageOnlyTooSoon(uid types.UID, cur *corev1.PodCondition, want corev1.PodCondition, basis string) (time.Duration, bool) {
	if cur == nil || cur.Status != want.Status || cur.Reason != want.Reason {
		return 0, false
	}
	c.mu.Lock()
	s, ok := c.sent[uid]
	c.mu.Unlock()
	if !ok || s.basis != basis {
		return 0, false
	}
	left := s.at.Add(messageEvery).Sub(c.now())
	return left, left > 0
}

// alreadySent reports whether want was patched onto this very version of
// the pod, which the cache does not show yet: patching again would only
// repeat it.
func (c *Controller) alreadySent(pod *corev1.Pod, want corev1.PodCondition) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sent[pod.UID]
	return ok && s.baseRV == pod.ResourceVersion && publish.Shows(&s.cond, want)
}

// desired is the condition a gated pod should show, or false when it is
// too early to say (judge); with its basis, which names the marker files it
// comes from as they are on disk (not the re-checks' progress).
func (c *Controller) desired(pod *corev1.Pod) (corev1.PodCondition, string, bool) {
	var v podView
	var basis string
	if !pod.Spec.HostNetwork {
		v.Markers, v.Unreadable, basis = c.podMarkers(pod)
		v.Strays = c.strays()
	}
	j := judge(pod, v, judgeOptions{CondType: c.opts.ConditionType, PendingTimeout: c.opts.PendingTimeout,
		UnobservedGrace: c.opts.UnobservedGrace, UnobservedReady: c.opts.Unobserved == UnobservedReady}, c.now())
	if j.After > 0 {
		c.queue.AddAfter(pod.Namespace+"/"+pod.Name, j.After)
	}
	if j.FromStrays {
		basis = "strays"
	}
	return j.Cond, basis, j.Publish
}

// podMarkers reads the pod's markers, starting re-checks for the pending
// ones and showing their latest progress. Markers that exist but cannot be
// read come back apart, and are retried.
func (c *Controller) podMarkers(pod *corev1.Pod) ([]*marker.Marker, []publish.Unreadable, string) {
	var out []*marker.Marker
	var bad []publish.Unreadable
	var basis strings.Builder
	for _, path := range c.markerPaths(pod.UID) {
		m, err := c.read(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // its event, or the next scan, forgets it
		case err != nil:
			c.mu.Lock()
			c.unreadable[path] = err
			c.mu.Unlock()
			bad = append(bad, publish.Unreadable{Path: path, Err: err})
			fmt.Fprintf(&basis, "%s unreadable: %v\n", path, err)
			continue
		}
		fmt.Fprintf(&basis, "%s %s %d\n", path, m.State, m.CreatedAt.UnixNano())
		c.readable(path)
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
		out = append(out, m)
	}
	return out, bad, basis.String()
}

func (c *Controller) markerPaths(uid types.UID) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var paths []string
	for p := range c.byUID[uid] {
		paths = append(paths, p)
	}
	slices.Sort(paths) // a stable basis (see desired)
	return paths
}

// noteRecreated logs, once, markers that name this pod's name but an older
// UID: they are never published on the new pod.
func (c *Controller) noteRecreated(pod *corev1.Pod) {
	key := pod.Namespace + "/" + pod.Name
	c.mu.Lock()
	var stale []string
	for path, ref := range c.markers {
		if ref.podKey == key && ref.uid != pod.UID {
			stale = append(stale, path)
		}
	}
	c.mu.Unlock()
	for _, path := range stale {
		c.note(path, "the pod was recreated; this marker is for the old one, not publishing", "pod", key, "podUID", pod.UID)
	}
}

func (c *Controller) observeLatency(uid types.UID, want corev1.PodCondition) {
	if want.Reason != publish.ReasonProgrammed && want.Reason != publish.ReasonNotProgrammed {
		return
	}
	var newest time.Time
	for _, p := range c.markerPaths(uid) {
		if info, err := os.Stat(p); err == nil && info.ModTime().After(newest) {
			newest = info.ModTime()
		}
	}
	if !newest.IsZero() {
		c.metrics.PublishLatency.Observe(time.Since(newest).Seconds())
	}
}

// observeWait records each marker state's wait once.
func (c *Controller) observeWait(path string, m *marker.Marker) {
	c.mu.Lock()
	seen := c.observed[path] == m.State+m.CreatedAt.String()
	c.observed[path] = m.State + m.CreatedAt.String()
	c.mu.Unlock()
	if !seen {
		c.metrics.MarkerWait.WithLabelValues(m.State).Observe(float64(m.WaitedMs) / 1000)
	}
}

// countADD counts the ADD a marker tells of in netready_add_wait_seconds,
// once, as the ADD left it: ready, or pending (timeout_proceed); a re-check
// that later makes it ready keeps its start and is not counted again.
func (c *Controller) countADD(path string, m *marker.Marker) {
	c.mu.Lock()
	seen := c.addSeen[path].Equal(m.CreatedAt.Time)
	c.addSeen[path] = m.CreatedAt.Time
	c.mu.Unlock()
	if seen || m.CreatedAt.Before(c.started) {
		return
	}
	o := outcome.Ready
	if m.State == marker.StatePending {
		o = outcome.TimeoutProceed
	}
	c.metrics.AddWait.WithLabelValues(m.Network, o).Observe(float64(m.WaitedMs) / 1000)
}

// readJournal counts the records appended to a network folder's outcome
// journal since it was last read. At start-up the journal is followed
// from its end: what is there was counted before a restart.
func (c *Controller) readJournal(dir string) {
	j := c.journals[dir]
	if j == nil {
		j = outcome.NewReader(dir, !c.scanned)
		c.journals[dir] = j
	}
	recs, err := j.Read()
	if err != nil {
		c.note(dir, "outcome journal", "err", err)
	}
	for _, r := range recs {
		c.metrics.AddWait.WithLabelValues(filepath.Base(dir), r.Outcome).Observe(float64(r.WaitedMs) / 1000)
	}
}

// startCheck goes on with a pending marker's checks, once per marker,
// until they hold, the marker goes, or the pod does. It never gives up:
// after --pending-timeout it backs off to one round a minute.
func (c *Controller) startCheck(path string, m *marker.Marker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, indexed := c.markers[path]; !indexed {
		// DEL removed it after it was read: a re-check now would live
		// until the IP is reused, and count as pending all that time.
		return
	}
	if st := c.checking[path]; st != nil {
		if st.created.Equal(m.CreatedAt.Time) {
			return
		}
		st.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &recheckState{created: m.CreatedAt.Time, cancel: cancel}
	c.checking[path] = st
	c.setPendingLocked()
	podKey := m.Pod.Namespace + "/" + m.Pod.Name
	sched := pending.Schedule{Round: recheckRound, Patience: c.opts.PendingTimeout, MaxGap: recheckMax}
	go func() {
		defer cancel()
		_, err := c.recheck(ctx, c.store, m, sched, func(p *marker.Marker) {
			c.mu.Lock()
			if c.checking[path] == st {
				c.progress[path] = p
			}
			c.mu.Unlock()
			c.queue.Add(podKey)
		})
		switch {
		case err == nil:
			c.log.Info("pending attachment is now programmed", "marker", path)
		case !errors.Is(err, context.Canceled):
			c.log.Warn("stopped re-checking a pending attachment", "marker", path, "err", err)
		}
		c.mu.Lock()
		if c.checking[path] == st {
			st.done = true
			c.setPendingLocked()
		}
		c.mu.Unlock()
		c.queue.Add(podKey)
	}()
}

func (c *Controller) setPendingLocked() {
	n := 0
	var oldest time.Time
	for _, st := range c.checking {
		if !st.done {
			n++
			if oldest.IsZero() || st.created.Before(oldest) {
				oldest = st.created
			}
		}
	}
	c.metrics.Pending.Set(float64(n))
	if oldest.IsZero() {
		c.metrics.PendingOldest.Set(0)
	} else {
		c.metrics.PendingOldest.Set(float64(oldest.UnixNano()) / 1e9)
	}
}

func (c *Controller) stopCheck(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopCheckLocked(path)
}

func (c *Controller) stopCheckLocked(path string) {
	if st, ok := c.checking[path]; ok {
		st.cancel()
		delete(c.checking, path)
		c.setPendingLocked()
	}
	delete(c.progress, path)
}

func (c *Controller) stopAllChecks() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, st := range c.checking {
		st.cancel()
		delete(c.checking, p)
	}
}

// forget drops what is known of a removed marker, and returns what it
// named.
func (c *Controller) forget(path string) (markerRef, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// One step with the unindexing: startCheck, under the same lock,
	// then sees the path gone and starts nothing.
	c.stopCheckLocked(path)
	ref, ok := c.markers[path]
	c.unindexLocked(path)
	delete(c.logged, path)
	delete(c.observed, path)
	delete(c.addSeen, path)
	delete(c.unreadable, path)
	return ref, ok
}

func (c *Controller) unindexLocked(path string) {
	ref, ok := c.markers[path]
	if !ok {
		return
	}
	delete(c.markers, path)
	if paths := c.byUID[ref.uid]; paths != nil {
		delete(paths, path)
		if len(paths) == 0 {
			delete(c.byUID, ref.uid)
		}
	}
}
