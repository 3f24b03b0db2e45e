// Package conditions keeps the readiness condition of every gated pod on
// this node true to the pod's markers: it follows the markers (inotify and
// a resync) and the node's pods (an informer), publishes through
// pkg/publish, re-checks attachments whose ADD gave up waiting, and counts
// each ADD's outcome. What its goroutines share has one owner (state);
// judging a pod is pure (judge), and what a later round must remember of
// a pod is kept in the state folder (memory), never read back from a
// condition's message.
package conditions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/outcome"
	"github.com/netready/netready/pkg/pending"
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
	// 403 until its RBAC cache is filled.
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

// MaxNotInEffectHold is the most NotInEffectHoldMax may be: where netready
// is not in effect, a pod must not wait on it for much longer than it
// would without it.
const MaxNotInEffectHold = 2 * time.Minute

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
	// NotInEffectHoldMax bounds how long a gated pod is held where
	// netready is not in effect (judge): one with no marker whose sandbox
	// came up while the installer backs off is held not ready this long
	// after its sandbox came up, and one whose pending markers wait only
	// on presets whose agent never wrote on this node this long after its
	// ADD began; then both are judged as Unobserved says. 0 holds none.
	// At most MaxNotInEffectHold.
	NotInEffectHoldMax time.Duration
}

// rechecker goes on with a pending marker's checks; pending.Recheck in
// production.
type rechecker func(ctx context.Context, in pending.Inputs, m *marker.Marker, s pending.Schedule, progress func(*marker.Marker)) (*marker.Marker, error)

// Controller publishes one condition per gated pod of this node, computed
// from all of the pod's markers. Its work queue holds pod keys
// (namespace/name). What its main loop, workers, re-checks and informer
// share has one owner, state; the Node's warnings have theirs,
// nodewriter.Warnings.
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
	// keep writes a pod's memory (writeMemory).
	keep func(stateDir string, uid types.UID, m memory) error
	now  func() time.Time
	// retryEvery is how often unreadable markers are read again.
	retryEvery time.Duration
	// ADDs that began before started are not counted (a restart would
	// count them twice).
	started time.Time

	state    *state
	warnings *nodewriter.Warnings

	// The main loop alone uses these. journals follow each network's
	// outcome journal.
	journals map[string]*outcome.Reader
	scanned  bool
	// offChanged: SetOff changed the switch, for the main loop.
	offChanged chan struct{}
}

// New returns the controller of cfg.NodeName's pods; Run runs it.
func New(o Config, client kubeapi.Client, recorder kubeapi.EventRecorder, log *slog.Logger, m *metrics.Metrics) *Controller {
	c := &Controller{
		opts: o, client: client, log: log, metrics: m, recorder: recorder,
		store: marker.Store{Dir: o.StateDir},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryMin, retryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"}),
		recheck: pending.Recheck,
		read:    marker.ReadFile, keep: writeMemory,
		now: time.Now, retryEvery: unreadableRetry, started: time.Now(),
		state:    newState(m),
		journals: map[string]*outcome.Reader{}, offChanged: make(chan struct{}, 1),
	}
	c.warnings = nodewriter.NewWarnings(o.NodeName, recorder, log, m, func() time.Time { return c.now() }, o.Unobserved, o.NotInEffectHoldMax)
	return c
}

// Ready reports whether the pod cache has synced and every marker was
// read once: the sidecar's /readyz.
func (c *Controller) Ready() bool { return c.state.isReady() }

// Run publishes until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	if err := os.MkdirAll(c.opts.StateDir, 0o755); err != nil {
		return err
	}
	informer := c.podInformer()
	c.pods = corelisters.NewPodLister(informer.GetIndexer())
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onPod,
		UpdateFunc: func(_, obj any) { c.onPod(obj) },
		DeleteFunc: c.onPodDeleted,
	}); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
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
	c.sweepMemory()
	c.state.started()
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
			c.state.stopped()
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
		case <-c.offChanged:
			c.queueGated()
		case <-retry.C:
			for _, path := range c.state.unreadablePaths() {
				c.onMarker(path)
			}
		}
	}
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
	if c.state.firstLog(key, msg) {
		c.log.Info(msg, append([]any{"key", key}, args...)...)
	}
}
