// Package watch owns the sidecar's count of the node's IP pools and the
// verdicts it keeps from them: it counts the pools of the networks whose
// netready entry asks for it, decides whether the Node is tainted
// NoSchedule while one is short (hysteresis, and a pool that can't tell
// holding its last verdict), and keeps the pool metrics. pkg/nodewriter
// writes what it decides on the Node. For pools that STATUS counts
// instead, it keeps STATUS's count fresh, and for pools whose truth is in
// the API server it keeps the verdict STATUS reads.
package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/netready/netready/pkg/health"
	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
)

// Watcher taints this node (netready.io/pod-ips-exhausted:NoSchedule)
// while the pool of a network whose entry has poolAction "taint" is short,
// and keeps the NetworkPoolExhausted condition saying why. It wakes on
// inotify events in the CNI config folder and host-local's data folders,
// and reads everything again every resync.
//
// What it does not know, it leaves alone: while the config folder cannot
// be read, or an entry is invalid, it may add the taint but never removes
// it; while a pool can't tell (its agent does not answer, its count is
// stale or cannot be read), that pool's last verdict stands, for as long
// as it lasts. A network whose entry leaves the config
// folder (a vendor's rewrite, which netready-install repairs) is still
// counted for forgetAfter, so that its taint and hysteresis outlive the
// rewrite.
type Watcher struct {
	confDir     string
	node        string
	nodes       *nodewriter.Writer
	resync      time.Duration
	forgetAfter time.Duration
	log         *slog.Logger
	metrics     *metrics.Metrics
	health      *health.Health
	now         func() time.Time
	newWatcher  func() (*fsnotify.Watcher, error)

	nets []pool.Network
	// gone holds networks whose entry left the config folder, with when.
	gone map[string]goneNetwork
	// pluginDirs are the config folder's subfolders: a network's plugin
	// folder (--mode plugin-dir) may hold its entry.
	pluginDirs []string
	// loaded says w.nets (and netsUnsure) come from a read of the config
	// folder; confChanged asks for a new read, set by its inotify events.
	loaded      bool
	netsUnsure  bool
	confChanged atomic.Bool
	// series are host-local's metrics' label sets (network, range set)
	// written at the last count; sourceSeries the per-source ones
	// (network, source).
	series, sourceSeries map[[2]string]bool
	// short holds, per network and range set, whether it was short at the
	// last count that saw it: the hysteresis, kept for range sets that
	// come and go. seeded is what a range set unseen before the first
	// clean count starts with: true when the node carried the taint at
	// start-up, so a restart never lifts a taint that still applies.
	// Range sets first seen later start as not short.
	short    map[string]bool
	seeded   *bool
	seedDone bool
	// statusInactive is the file and cniVersion last reported as never
	// getting STATUS calls, at statusInactiveAt.
	statusInactive   string
	statusInactiveAt time.Time
	// applied is what the node showed after the last read or write.
	applied *bool
	noted   string
	// keepAt is when a pool that changed too recently for its count to be
	// kept for STATUS can be counted again and kept; zero when none.
	keepAt time.Time
	// memos are what each agent's source keeps between reads; unknown is
	// the cause of each network's current "can't tell", noted once.
	memos   map[string]*pool.Memo
	unknown map[string]unknownNote
	// verdict is each network's last verdict (exhausted, hysteresis
	// included) from a count that could tell; held is since when a
	// network can't tell. While it can't, its last verdict stands, so
	// that can't tell neither adds a taint nor lifts one (held.go).
	// heldSaid is the held networks the condition last named.
	verdict  map[string]bool
	held     map[string]time.Time
	heldSaid string
	// clusters makes the sources of pools in the API server, and made
	// holds those asked for, by type, until no network counts from them;
	// verdictErr is the last failure to keep a network's verdict for
	// STATUS; clusterSince is when a source type was first asked for.
	clusters     ClusterSources
	made         map[string]ClusterSource
	verdictErr   map[string]string
	clusterSince map[string]time.Time
}

// retryMax bounds the backoff of a failing Node read or write.
const retryMax = 10 * time.Second

// healthPart is the pool watch's name in /healthz.
const healthPart = "pool watch"

// Config is what the watch is told.
type Config struct {
	ConfDir string // the node's CNI config folder, read-only
	Node    string
	// Resync: every pool is counted and compared with the Node this
	// often, besides inotify.
	Resync time.Duration
	// ForgetAfter: how long a network whose netready entry left the
	// config folder is still counted.
	ForgetAfter time.Duration
	// Clusters counts the pools whose truth is in the API server
	// (calico-ipam, ovn-kubernetes); nil counts none: they cannot tell.
	Clusters ClusterSources
}

// New returns the watch of cfg.Node's pools; Run runs it.
func New(o Config, nodes kubeapi.Client, events kubeapi.EventRecorder, log *slog.Logger, m *metrics.Metrics, h *health.Health) *Watcher {
	w := &Watcher{confDir: o.ConfDir, node: o.Node, nodes: nodewriter.New(nodes, events, o.Node, log.With("part", "pool")), resync: o.Resync, forgetAfter: o.ForgetAfter,
		log: log.With("part", "pool"), metrics: m, health: h, now: time.Now, newWatcher: fsnotify.NewWatcher,
		short: map[string]bool{}, series: map[[2]string]bool{}, sourceSeries: map[[2]string]bool{}, gone: map[string]goneNetwork{},
		memos: map[string]*pool.Memo{}, unknown: map[string]unknownNote{}, verdict: map[string]bool{}, held: map[string]time.Time{},
		clusters: o.Clusters, made: map[string]ClusterSource{}, verdictErr: map[string]string{}, clusterSince: map[string]time.Time{}}
	if w.clusters == nil {
		w.clusters = noClusterSources
	}
	return w
}

// Run keeps the watch going until ctx ends. While it cannot run (no
// inotify instance to be had: the limit is shared with the host), /healthz
// fails, so that kubelet restarts the container, and it is tried again.
func (w *Watcher) Run(ctx context.Context) {
	backoff := time.Second
	for {
		err := w.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		w.health.Set(healthPart, err)
		w.log.Error("pool watch stopped; no taint is added or lifted until it runs again", "err", err, "retryAfter", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
}

// watch runs the watch once, until ctx ends (nil) or inotify fails.
func (w *Watcher) watch(ctx context.Context) error {
	fsw, err := w.newWatcher()
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer fsw.Close()
	w.health.Set(healthPart, nil)
	failed := make(chan error, 1)
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	go func() {
		for {
			select {
			case ev, ok := <-fsw.Events:
				if !ok {
					failed <- errors.New("inotify events closed")
					return
				}
				// Allocations only need a count; the config folder (and
				// its plugin folders) a read of every file in it.
				if conf := filepath.Clean(w.confDir); ev.Name == conf || strings.HasPrefix(ev.Name, conf+string(filepath.Separator)) {
					w.confChanged.Store(true)
				}
				poke()
			case err, ok := <-fsw.Errors:
				if !ok {
					failed <- errors.New("inotify errors closed")
					return
				}
				w.log.Warn("inotify", "err", err)
				w.confChanged.Store(true)
				poke()
			}
		}
	}()
	tick := time.NewTicker(w.resync)
	defer tick.Stop()
	var retry <-chan time.Time
	backoff := time.Second
	full := true
	for {
		if err := w.reconcile(ctx, fsw, full); err != nil {
			w.metrics.APIErrors.WithLabelValues(kubeapi.Reason(err)).Inc()
			w.log.Warn("node not updated; retrying", "node", w.node, "after", backoff, "err", err)
			// Capped as the pod queue is: after a long outage, the taint
			// lags the API server's return by at most retryMax.
			retry, backoff = time.After(backoff), min(2*backoff, retryMax, w.resync)
		} else {
			retry, backoff = nil, time.Second
		}
		var expire, keep, poll <-chan time.Time
		if at, ok := w.nextExpiry(); ok {
			expire = time.After(time.Until(at))
		}
		if !w.keepAt.IsZero() {
			keep = time.After(time.Until(w.keepAt))
		}
		if w.polled() {
			// An agent's pool sends no inotify event.
			poll = time.After(agentPoll)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case <-wake:
			full = false
		case <-keep:
			full = false
		case <-poll:
			full = false
		case <-retry:
			full = true
		case <-tick.C:
			full = true
		case <-expire:
			full = true
		}
	}
}

// nextExpiry is when the first held network is forgotten.
func (w *Watcher) nextExpiry() (time.Time, bool) {
	var first time.Time
	for _, g := range w.gone {
		if at := g.since.Add(w.forgetAfter); first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}
