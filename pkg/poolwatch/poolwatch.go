// Package poolwatch owns the node's IP pools as the scheduler sees them:
// it counts host-local's pools of the networks whose netready entry asks
// for it, taints the Node NoSchedule while one is short, keeps the
// NetworkPoolExhausted condition and the pool metrics saying why, and
// records a Node Event when the taint goes on and comes off. For pools
// that STATUS counts instead, it keeps STATUS's count fresh.
package poolwatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/health"
	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/pkg/taint"
)

// Watcher taints this node (netready.io/pod-ips-exhausted:NoSchedule)
// while the pool of a network whose entry has poolAction "taint" is short,
// and keeps the NetworkPoolExhausted condition saying why. It wakes on
// inotify events in the CNI config folder and host-local's data folders,
// and reads everything again every resync.
//
// What it does not know, it leaves alone: while the config folder cannot
// be read, or a pool cannot be counted, or an entry is invalid, it may add
// the taint but never removes it. A network whose entry leaves the config
// folder (a vendor's rewrite, which netready-install repairs) is still
// counted for forgetAfter, so that its taint and hysteresis outlive the
// rewrite.
type Watcher struct {
	confDir     string
	node        string
	nodes       kubeapi.Client
	events      kubeapi.EventRecorder // Node Events for the taint; nil records none
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
	// series are the metrics' label sets written at the last count.
	series map[[2]string]bool
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
}

// goneNetwork is a network whose entry left the config folder at since.
type goneNetwork struct {
	pool.Network
	since time.Time
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
}

// New returns the watch of cfg.Node's pools; Run runs it.
func New(o Config, nodes kubeapi.Client, events kubeapi.EventRecorder, log *slog.Logger, m *metrics.Metrics, h *health.Health) *Watcher {
	return &Watcher{confDir: o.ConfDir, node: o.Node, nodes: nodes, events: events, resync: o.Resync, forgetAfter: o.ForgetAfter,
		log: log.With("part", "pool"), metrics: m, health: h, now: time.Now, newWatcher: fsnotify.NewWatcher,
		short: map[string]bool{}, series: map[[2]string]bool{}, gone: map[string]goneNetwork{}}
}

// judgement is one count of every watched pool.
type judgement struct {
	short   bool     // a pool with poolAction taint is short
	unsure  bool     // something could not be read: never lift the taint
	message []string // per network
	// reloaded: the config folder was read again for this count.
	reloaded bool
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
		var expire, keep <-chan time.Time
		if at, ok := w.nextExpiry(); ok {
			expire = time.After(time.Until(at))
		}
		if !w.keepAt.IsZero() {
			keep = time.After(time.Until(w.keepAt))
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

// reconcile counts every pool and, when the verdict differs from what the
// node shows (or on a full round), reads the node and patches it.
func (w *Watcher) reconcile(ctx context.Context, fsw *fsnotify.Watcher, full bool) error {
	ctx, cancel := context.WithTimeout(ctx, kubeapi.Timeout)
	defer cancel()
	if w.seeded == nil {
		// The node's taint seeds the hysteresis before the first count.
		node, err := w.nodes.GetNode(ctx, w.node)
		if err != nil {
			return fmt.Errorf("get node: %w", err)
		}
		has := taint.Has(node)
		w.seeded, w.applied = &has, &has
		w.setTainted(has)
		full = true
	}
	j := w.judge(fsw, full)
	// A change of the config folder is rare, and changes what the
	// condition says beyond counts: write it as on a full round.
	full = full || j.reloaded
	want := j.short
	if !want && j.unsure && *w.applied {
		want = true // lift it only on a clean count
	}
	if !full && want == *w.applied {
		return nil
	}
	node, err := w.nodes.GetNode(ctx, w.node)
	if err != nil {
		return fmt.Errorf("get node: %w", err)
	}
	if len(w.nets) == 0 && len(w.gone) == 0 && !taint.Has(node) && taint.Current(node) == nil {
		return nil // never touched: nothing to say
	}
	if p := taint.SpecPatch(node, want); p != nil {
		if node, err = w.nodes.PatchNode(ctx, w.node, types.MergePatchType, p); err != nil {
			return fmt.Errorf("patch the taint: %w", err)
		}
		w.log.Info("node taint", "taint", taint.Key, "present", want, "pools", strings.Join(j.message, "; "))
		w.recordTaint(node, want, strings.Join(j.message, "; "))
	}
	has := taint.Has(node)
	w.applied = &has
	w.setTainted(has)
	msg := strings.Join(j.message, "; ")
	if len(w.nets) == 0 && len(w.gone) == 0 {
		msg = "no network on this node has a pool netready watches"
	}
	// The message alone is rewritten only on full rounds: counts move with
	// every pod, and every write to a Node reaches every watcher of nodes.
	if p := taint.StatusPatch(node, taint.Condition(want, msg), w.now(), full); p != nil {
		if _, err := w.nodes.PatchNode(ctx, w.node, types.StrategicMergePatchType, p, "status"); err != nil {
			return fmt.Errorf("patch the %s condition: %w", taint.ConditionType, err)
		}
	}
	return nil
}

func (w *Watcher) setTainted(has bool) {
	v := 0.0
	if has {
		v = 1
	}
	w.metrics.Tainted.Set(v)
}

// recordTaint records a Node Event for a taint netready put on or took
// off, naming the pools and their counts.
func (w *Watcher) recordTaint(node *corev1.Node, on bool, pools string) {
	if w.events == nil {
		return
	}
	if on {
		w.events.Eventf(node, nil, corev1.EventTypeWarning, taint.ReasonExhausted, "Taint",
			"netready tainted the node %s:NoSchedule: new pods go to other nodes until an IP pool has room: %s", taint.Key, pools)
		return
	}
	w.events.Eventf(node, nil, corev1.EventTypeNormal, taint.ReasonAvailable, "Untaint",
		"netready lifted %s: every IP pool has room: %s", taint.Key, pools)
}

// judge counts every pool. It reads the config folder first on full rounds
// and after a change in it, and keeps the inotify watches in step.
func (w *Watcher) judge(fsw *fsnotify.Watcher, full bool) judgement {
	reloaded := false
	if !w.loaded || full || w.confChanged.Swap(false) {
		w.loadNetworks()
		reloaded = true
	}
	nets, held := w.counted()
	// Every time: host-local makes a network's folder at its first ADD.
	w.addWatches(fsw, nets)
	j := judgement{unsure: w.netsUnsure, reloaded: reloaded}
	series := map[[2]string]bool{}
	w.keepAt = time.Time{}
	for _, n := range nets {
		rs, keepAt, err := count(n, time.Now())
		if !keepAt.IsZero() && (w.keepAt.IsZero() || keepAt.Before(w.keepAt)) {
			w.keepAt = keepAt
		}
		if err != nil {
			j.unsure = true
			j.message = append(j.message, fmt.Sprintf("%s: cannot count: %v", n.Network, err))
			continue // its hysteresis stays as it was
		}
		for _, r := range rs {
			key := n.Network + " " + r.Set
			was, seen := w.short[key]
			if !seen {
				was = !w.seedDone && *w.seeded
			}
			s := pool.Short(r, n.MinFree, was)
			w.short[key] = s
			if s && n.Action == config.PoolTaint {
				j.short = true
			}
			free, _ := r.Free().Float64()
			size, _ := r.Usable.Float64()
			w.metrics.PoolFree.WithLabelValues(n.Network, r.Set).Set(free)
			w.metrics.PoolSize.WithLabelValues(n.Network, r.Set).Set(size)
			series[[2]string{n.Network, r.Set}] = true
		}
		msg := pool.Describe(n.Network, rs) + fmt.Sprintf(" (minFree %d)", n.MinFree)
		if g, ok := held[n.Network]; ok {
			msg += fmt.Sprintf(" (its netready entry left the CNI config at %s; still counted until %s)",
				g.since.UTC().Format(time.RFC3339), g.since.Add(w.forgetAfter).UTC().Format(time.RFC3339))
		}
		j.message = append(j.message, msg)
	}
	// Series of pools no longer watched go; the others are never absent
	// from a scrape.
	for s := range w.series {
		if !series[s] {
			w.metrics.PoolFree.DeleteLabelValues(s[0], s[1])
			w.metrics.PoolSize.DeleteLabelValues(s[0], s[1])
		}
	}
	w.series = series
	if !j.unsure {
		w.seedDone = true
	}
	return j
}

// counted is every network to count: those of the config folder, and
// those whose entry left it less than forgetAfter ago (returned apart too).
// Networks held longer are forgotten here.
func (w *Watcher) counted() ([]pool.Network, map[string]goneNetwork) {
	nets := slices.Clone(w.nets)
	held := map[string]goneNetwork{}
	for name, g := range w.gone {
		if w.now().Sub(g.since) >= w.forgetAfter {
			delete(w.gone, name)
			w.log.Info("forgetting a network whose netready entry left the CNI config", "network", name, "since", g.since)
			continue
		}
		nets = append(nets, g.Network)
		held[name] = g
	}
	return nets, held
}

// count counts one network's pool. A missing allocation folder is an empty
// pool (host-local makes it at the network's first ADD), but a missing
// dataDir above it is a folder this container does not see: not mounted.
//
// A pool that STATUS counts (poolAction "notready") is counted through
// STATUS's kept count, and the count is kept there: STATUS then reads one
// small file instead of the whole folder after each change. keepAt is when
// a pool that changed too recently to keep a count can be counted again.
func count(n pool.Network, start time.Time) (rs []pool.Range, keepAt time.Time, err error) {
	if _, err := os.Stat(filepath.Dir(n.Dir)); errors.Is(err, fs.ErrNotExist) {
		return nil, time.Time{}, fmt.Errorf("host-local's dataDir %s does not exist here: mount it into the sidecar at the same path", filepath.Dir(n.Dir))
	}
	if n.Action != config.PoolNotReady {
		rs, err = n.Count()
		return rs, time.Time{}, err
	}
	return n.CountCached(pool.CachePath(n.StateDir, n.Network), start)
}

// loadNetworks reads the config folder. A folder that cannot be read says
// nothing about the pools: the last networks stay, and so does any taint.
func (w *Watcher) loadNetworks() {
	nets, problems, err := pool.Networks(w.confDir)
	switch {
	case err != nil:
		w.note(err)
		w.netsUnsure = true
		return
	case problems != nil:
		w.note(problems)
	default:
		w.note(nil)
	}
	now := w.now()
	for _, old := range w.nets {
		if _, held := w.gone[old.Network]; !held && !slices.ContainsFunc(nets, func(n pool.Network) bool { return n.Network == old.Network }) {
			w.gone[old.Network] = goneNetwork{Network: old, since: now}
			w.log.Warn("a network's netready entry left the CNI config; still counting its pool for a while", "network", old.Network, "for", w.forgetAfter)
		}
	}
	for _, n := range nets {
		delete(w.gone, n.Network)
	}
	w.pluginDirs = w.pluginDirs[:0]
	if entries, err := os.ReadDir(w.confDir); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				w.pluginDirs = append(w.pluginDirs, filepath.Join(w.confDir, e.Name()))
			}
		}
	}
	w.nets, w.netsUnsure, w.loaded = nets, problems != nil, true
	w.noteStatusActive()
}

// addWatches adds an inotify watch on the config folder, its plugin
// folders, and each network's allocation folder (or, before host-local
// made it, its parent). A folder that does not exist yet is added at a
// later read: its parent's event or the resync. One that was removed
// drops out of WatchList.
func (w *Watcher) addWatches(fsw *fsnotify.Watcher, nets []pool.Network) {
	want := map[string]bool{filepath.Clean(w.confDir): true}
	for _, d := range w.pluginDirs {
		want[d] = true
	}
	for _, n := range nets {
		want[n.Dir] = true
		want[filepath.Dir(n.Dir)] = true
	}
	have := map[string]bool{}
	for _, dir := range fsw.WatchList() {
		have[dir] = true
		if !want[dir] {
			_ = fsw.Remove(dir) // gone already, most likely
		}
	}
	for dir := range want {
		if !have[dir] {
			// A folder that does not exist yet is watched through its
			// parent; the next full round adds it.
			_ = fsw.Add(dir)
		}
	}
}

// note logs a problem of the config folder once, and its end.
func (w *Watcher) note(err error) {
	s := ""
	if err != nil {
		s = err.Error()
	}
	if s == w.noted {
		return
	}
	w.noted = s
	if err != nil {
		w.log.Warn("CNI config: the taint will not be lifted until this is fixed", "confDir", w.confDir, "err", strings.ReplaceAll(s, "\n", "; "))
	} else {
		w.log.Info("CNI config readable, every entry valid", "confDir", w.confDir)
	}
}

// LiftAll is the pool side of an uninstall: it takes netready's taint and
// condition off the node, retrying with backoff until that is done or ctx
// ends. /readyz waits for it, so that a rolled-out uninstall DaemonSet
// means every node is clear.
func LiftAll(ctx context.Context, nodes kubeapi.Client, node string, log *slog.Logger, h *health.Health) {
	log = log.With("part", "pool")
	lift := func() error {
		ctx, cancel := context.WithTimeout(ctx, kubeapi.Timeout)
		defer cancel()
		n, err := nodes.GetNode(ctx, node)
		if err != nil {
			return fmt.Errorf("get node: %w", err)
		}
		if p := taint.SpecPatch(n, false); p != nil {
			if n, err = nodes.PatchNode(ctx, node, types.MergePatchType, p); err != nil {
				return fmt.Errorf("remove the taint: %w", err)
			}
		}
		if p := taint.RemoveConditionPatch(n); p != nil {
			if _, err := nodes.PatchNode(ctx, node, types.StrategicMergePatchType, p, "status"); err != nil {
				return fmt.Errorf("remove the %s condition: %w", taint.ConditionType, err)
			}
		}
		return nil
	}
	h.SetUnready(healthPart, errors.New("uninstall: the taint is not lifted yet"))
	for backoff := time.Second; ; backoff = min(2*backoff, time.Minute) {
		err := lift()
		if err == nil {
			h.SetUnready(healthPart, nil)
			log.Info("uninstall: the node carries no netready taint or condition", "taint", taint.Key)
			return
		}
		log.Error("uninstall: could not lift the taint; will retry", "err", err, "retryAfter", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}
