package watch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/pool"
)

// judgement is one count of every watched pool.
type judgement struct {
	short bool // a pool with poolAction taint is short, or held as it was
	// unsure: the config folder could not be read, or an entry is
	// invalid: never lift the taint.
	unsure bool
	parts  []pool.Part // per network, for the condition's message
	// held names the networks that can't tell, whose last verdict stands.
	held []string
	// reloaded: the config folder was read again for this count.
	reloaded bool
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
	series, sourceSeries := map[[2]string]bool{}, map[[2]string]bool{}
	w.keepAt = time.Time{}
	for _, n := range nets {
		cnt, keepAt, err := w.count(n, time.Now())
		sourceSeries[[2]string{n.Network, n.Source.Type()}] = true // kept while it cannot count, too
		if !keepAt.IsZero() && (w.keepAt.IsZero() || keepAt.Before(w.keepAt)) {
			w.keepAt = keepAt
		}
		part := pool.Part{Network: n.Network, Source: n.Source.Type(), MinFree: n.MinFree}
		if why := cantTell(cnt, err); why != "" {
			// Its hysteresis, and its last verdict, stay as they were.
			if err == nil {
				w.setAddresses(n, cnt)
			}
			exhausted := w.hold(n, why, err)
			if exhausted && n.Action == config.PoolTaint {
				j.short = true
			}
			j.held = append(j.held, n.Network)
			part.Exhausted, part.HeldSince, part.Why = exhausted, w.held[n.Network], why
			if err == nil {
				part.Count = cnt
			}
		} else {
			w.told(n)
			w.setAddresses(n, cnt)
			exhausted := false
			for _, r := range cnt.Ranges {
				key := n.Network + " " + r.Set
				was, seen := w.short[key]
				if !seen {
					was = !w.seedDone && *w.seeded
				}
				// A pool or range set its source grows is not exhausted
				// while it is short.
				s := pool.Short(r, n.MinFree, was) && !cnt.Grows && !r.Grows
				w.short[key] = s
				exhausted = exhausted || s
				if n.Origin() == pool.Folder {
					free, _ := r.Free().Float64()
					size, _ := r.Usable.Float64()
					w.metrics.PoolFree.WithLabelValues(n.Network, r.Set).Set(free)
					w.metrics.PoolSize.WithLabelValues(n.Network, r.Set).Set(size)
					series[[2]string{n.Network, r.Set}] = true
				}
			}
			w.verdict[n.Network] = exhausted
			if exhausted && n.Action == config.PoolTaint {
				j.short = true
			}
			// Which network is short, for people and for kubectl netready
			// (pool.ParseLine reads the message back).
			part.Count, part.Exhausted = cnt, exhausted
		}
		if g, ok := held[n.Network]; ok {
			part.Note = fmt.Sprintf("its netready entry left the CNI config at %s; still counted until %s",
				g.since.UTC().Format(time.RFC3339), g.since.Add(w.forgetAfter).UTC().Format(time.RFC3339))
		}
		j.parts = append(j.parts, part)
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
	for s := range w.sourceSeries {
		if !sourceSeries[s] {
			w.deleteSourceSeries(s[0], s[1])
		}
	}
	w.sourceSeries = sourceSeries
	w.releaseClusters(nets)
	if !j.unsure && len(j.held) == 0 {
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
			w.forget(name)
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
//
// An agent's pool is read from the agent, within its bound; it cannot
// tell rather than fail. A pool in the API server is counted by its
// ClusterSource (countCluster).
func (w *Watcher) count(n pool.Network, start time.Time) (cnt pool.Count, keepAt time.Time, err error) {
	switch n.Origin() {
	case pool.Sidecar:
		cnt, err = w.countCluster(n)
		return cnt, time.Time{}, err
	case pool.Agent:
		memo := w.memos[n.Network]
		if memo == nil {
			memo = &pool.Memo{}
			w.memos[n.Network] = memo
		}
		cnt, err = n.Source.Read(context.Background(), memo)
		return cnt, time.Time{}, err
	}
	if _, err := os.Stat(filepath.Dir(n.Dir)); errors.Is(err, fs.ErrNotExist) {
		return cnt, time.Time{}, fmt.Errorf("host-local's dataDir %s does not exist here: mount it into the sidecar at the same path", filepath.Dir(n.Dir))
	}
	if n.Action != config.PoolNotReady {
		cnt.Ranges, err = n.Count()
		return cnt, time.Time{}, err
	}
	cnt.Ranges, keepAt, err = n.CountCached(pool.CachePath(n.StateDir, n.Network), start)
	return cnt, keepAt, err
}
