package watch

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
)

// Can't tell changes no taint. A pool that cannot be counted (an error),
// or whose source cannot tell (an agent that answers 503 during its own
// rolling update, a stale or unreadable count, a source still syncing),
// keeps the verdict of its last count that could tell, for as long as it
// lasts: an exhausted pool keeps the node tainted, one with room adds no
// taint. A pool that has not told since the sidecar started holds what
// the node showed when it began to can't tell. The condition names it
// ("held: can't tell since …") and a Warning Event gives the cause once.

// cantTell is why a count cannot tell, or "".
func cantTell(cnt pool.Count, err error) string {
	if err != nil {
		return err.Error()
	}
	return cnt.Unknown
}

// hold notes that n can't tell, why, and returns the verdict that stands.
func (w *Watcher) hold(n pool.Network, why string, err error) bool {
	if _, ok := w.held[n.Network]; !ok {
		w.held[n.Network] = w.now()
	}
	exhausted, ok := w.verdict[n.Network]
	if !ok {
		// No count of its own yet: what the node shows now is what it
		// holds (the node's taint at start-up, after a restart).
		exhausted = n.Action == config.PoolTaint && *w.applied
		w.verdict[n.Network] = exhausted
	}
	var syncing syncingError
	w.noteUnknown(n, why, exhausted, !errors.As(err, &syncing))
	return exhausted
}

// told notes that n could tell again.
func (w *Watcher) told(n pool.Network) {
	delete(w.held, n.Network)
	w.noteUnknown(n, "", false, false)
}

// heldKey is the held networks, for noticing that the set changed.
func heldKey(held []string) string {
	s := slices.Clone(held)
	slices.Sort(s)
	return strings.Join(s, "\x00")
}

// forget drops what the watch keeps about a network that is no longer
// counted.
func (w *Watcher) forget(network string) {
	delete(w.memos, network)
	delete(w.unknown, network)
	delete(w.verdict, network)
	delete(w.held, network)
	delete(w.verdictErr, network)
	for key := range w.short {
		if strings.HasPrefix(key, network+" ") {
			delete(w.short, key)
		}
	}
}

// Releaser is a ClusterSource that can stop its watches: the watch
// releases it once no counted network needs it, and asks for a new one
// at the next need.
type Releaser interface {
	Release()
}

// releaseClusters releases the ClusterSources that no network in nets
// counts from.
func (w *Watcher) releaseClusters(nets []pool.Network) {
	for typ, cs := range w.made {
		if slices.ContainsFunc(nets, func(n pool.Network) bool { return n.Origin() == pool.Sidecar && n.Source.Type() == typ }) {
			continue
		}
		delete(w.made, typ)
		delete(w.clusterSince, typ)
		if r, ok := cs.(Releaser); ok {
			r.Release()
		}
		w.log.Info("no network counts its pool from the API server through this source any more; its watches stop", "source", typ)
	}
}

// unknownNote is a network's current spell of can't tell: its cause,
// and whether its Event is recorded.
type unknownNote struct {
	why     string
	evented bool
}

// noteUnknown keeps netready_pool_unknown and, once per spell of can't
// tell, records a Warning Node Event naming the cause (event false: only
// a log line, as for a source still syncing after a restart). A cause
// that changes within the spell is logged, not recorded again.
func (w *Watcher) noteUnknown(n pool.Network, why string, exhausted, event bool) {
	v := 0.0
	if why != "" {
		v = 1
	}
	w.metrics.PoolUnknown.WithLabelValues(n.Network, n.Source.Type()).Set(v)
	note, spell := w.unknown[n.Network]
	if why == "" {
		if spell {
			delete(w.unknown, n.Network)
			w.log.Info("the pool can be counted again", "network", n.Network, "source", n.Source.Type())
		}
		return
	}
	if note.why != why {
		held := "absent"
		if exhausted {
			held = "present"
		}
		w.log.Warn("cannot tell whether the pool is exhausted; its last verdict, and so the taint, stands until it can",
			"network", n.Network, "source", n.Source.Type(), "why", why, "taintHeld", held)
	}
	note.why = why
	if event && !note.evented && w.nodes.Warns() {
		note.evented = true
		w.nodes.Warn(nodewriter.ReasonPoolUnknown, "Count",
			"network %s: netready cannot tell whether its IP pool (%s) is exhausted, so the node's taint is held as it was until it can (since %s): %s",
			n.Network, n.Source.Type(), w.held[n.Network].UTC().Format(time.RFC3339), why)
	}
	w.unknown[n.Network] = note
}
