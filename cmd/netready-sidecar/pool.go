package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/pkg/taint"
)

// poolWatcher taints this node (netready.io/pod-ips-exhausted:NoSchedule)
// while the pool of a network whose entry has poolAction "taint" is short,
// and keeps the NetworkPoolExhausted condition saying why. It wakes on
// inotify events in the CNI config folder and host-local's data folders,
// and reads everything again every resync.
//
// What it does not know, it leaves alone: while the config folder cannot
// be read, or a pool cannot be counted, or an entry is invalid, it may add
// the taint but never removes it.
type poolWatcher struct {
	confDir string
	node    string
	nodes   kube
	resync  time.Duration
	log     *slog.Logger
	metrics *metrics
	now     func() time.Time

	nets []pool.Network
	// loaded says w.nets (and netsUnsure) come from a read of the config
	// folder; confChanged asks for a new read, set by its inotify events.
	loaded      bool
	netsUnsure  bool
	confChanged atomic.Bool
	// series are the metrics' label sets written at the last count.
	series map[[2]string]bool
	// short holds, per network and range set, whether it was short at the
	// last count: the hysteresis. seeded is what an unseen range set
	// starts with: true when the node carried the taint at start-up, so a
	// restart never lifts a taint that still applies.
	short  map[string]bool
	seeded *bool
	// applied is what the node showed after the last read or write.
	applied *bool
	noted   string
}

func newPoolWatcher(o options, nodes kube, log *slog.Logger, m *metrics) *poolWatcher {
	return &poolWatcher{confDir: o.CNIConfDir, node: o.NodeName, nodes: nodes, resync: o.PoolResync, log: log.With("part", "pool"),
		metrics: m, now: time.Now, short: map[string]bool{}, series: map[[2]string]bool{}}
}

// judgement is one count of every watched pool.
type judgement struct {
	short   bool     // a pool with poolAction taint is short
	unsure  bool     // something could not be read: never lift the taint
	message []string // per network
}

func (w *poolWatcher) run(ctx context.Context) error {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer fsw.Close()
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
					return
				}
				// Allocations only need a count; the config folder a
				// read of every file in it.
				if filepath.Clean(ev.Name) == filepath.Clean(w.confDir) || filepath.Dir(ev.Name) == filepath.Clean(w.confDir) {
					w.confChanged.Store(true)
				}
				poke()
			case err, ok := <-fsw.Errors:
				if !ok {
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
			w.metrics.apiErrors.WithLabelValues(reason(err)).Inc()
			w.log.Warn("node not updated; retrying", "node", w.node, "after", backoff, "err", err)
			// Capped as the pod queue is: after a long outage, the taint
			// lags the API server's return by at most retryMax.
			retry, backoff = time.After(backoff), min(2*backoff, retryMax, w.resync)
		} else {
			retry, backoff = nil, time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			full = false
		case <-retry:
			full = true
		case <-tick.C:
			full = true
		}
	}
}

// reconcile counts every pool and, when the verdict differs from what the
// node shows (or on a full round), reads the node and patches it.
func (w *poolWatcher) reconcile(ctx context.Context, fsw *fsnotify.Watcher, full bool) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if w.seeded == nil {
		// The node's taint seeds the hysteresis before the first count.
		node, err := w.nodes.GetNode(ctx, w.node)
		if err != nil {
			return fmt.Errorf("get node: %w", err)
		}
		has := taint.Has(node)
		w.seeded, w.applied = &has, &has
		full = true
	}
	j := w.judge(fsw, full)
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
	if len(w.nets) == 0 && !taint.Has(node) && taint.Current(node) == nil {
		return nil // never touched: nothing to say
	}
	if p := taint.SpecPatch(node, want); p != nil {
		if node, err = w.nodes.PatchNode(ctx, w.node, types.MergePatchType, p); err != nil {
			return fmt.Errorf("patch the taint: %w", err)
		}
		w.log.Info("node taint", "taint", taint.Key, "present", want, "pools", strings.Join(j.message, "; "))
	}
	has := taint.Has(node)
	w.applied = &has
	msg := strings.Join(j.message, "; ")
	if len(w.nets) == 0 {
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

// judge counts every pool. It reads the config folder first on full rounds
// and after a change in it, and keeps the inotify watches in step.
func (w *poolWatcher) judge(fsw *fsnotify.Watcher, full bool) judgement {
	if !w.loaded || full || w.confChanged.Swap(false) {
		w.loadNetworks()
	}
	// Every time: host-local makes a network's folder at its first ADD.
	w.watch(fsw)
	j := judgement{unsure: w.netsUnsure}
	next := map[string]bool{}
	series := map[[2]string]bool{}
	for _, n := range w.nets {
		rs, err := n.Count()
		if err != nil {
			j.unsure = true
			j.message = append(j.message, fmt.Sprintf("%s: cannot count: %v", n.Network, err))
			// Its hysteresis stays as it was.
			for key, was := range w.short {
				if strings.HasPrefix(key, n.Network+" ") {
					next[key] = was
				}
			}
			continue
		}
		for _, r := range rs {
			key := n.Network + " " + r.Set
			was, seen := w.short[key]
			if !seen {
				was = *w.seeded
			}
			s := pool.Short(r, n.MinFree, was)
			next[key] = s
			if s && n.Action == config.PoolTaint {
				j.short = true
			}
			free, _ := r.Free().Float64()
			size, _ := r.Usable.Float64()
			w.metrics.poolFree.WithLabelValues(n.Network, r.Set).Set(free)
			w.metrics.poolSize.WithLabelValues(n.Network, r.Set).Set(size)
			series[[2]string{n.Network, r.Set}] = true
		}
		j.message = append(j.message, pool.Describe(n.Network, rs)+fmt.Sprintf(" (minFree %d)", n.MinFree))
	}
	// Series of pools no longer watched go; the others are never absent
	// from a scrape.
	for s := range w.series {
		if !series[s] {
			w.metrics.poolFree.DeleteLabelValues(s[0], s[1])
			w.metrics.poolSize.DeleteLabelValues(s[0], s[1])
		}
	}
	w.short, w.series = next, series
	return j
}

// loadNetworks reads the config folder. A folder that cannot be read says
// nothing about the pools: the last networks stay, and so does any taint.
func (w *poolWatcher) loadNetworks() {
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
	w.nets, w.netsUnsure, w.loaded = nets, problems != nil, true
}

// watch adds an inotify watch on the config folder and on each network's
// allocation folder (or, before host-local made it, its parent).
// A folder that does not exist yet is added at a later read: its parent's
// event or the resync. One that was removed drops out of WatchList.
func (w *poolWatcher) watch(fsw *fsnotify.Watcher) {
	want := map[string]bool{filepath.Clean(w.confDir): true}
	for _, n := range w.nets {
		want[n.Dir] = true
		want[filepath.Dir(n.Dir)] = true
	}
	have := map[string]bool{}
	for _, dir := range fsw.WatchList() {
		have[dir] = true
		if !want[dir] {
			fsw.Remove(dir)
		}
	}
	for dir := range want {
		if !have[dir] {
			fsw.Add(dir)
		}
	}
}

// note logs a problem of the config folder once, and its end.
func (w *poolWatcher) note(err error) {
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
