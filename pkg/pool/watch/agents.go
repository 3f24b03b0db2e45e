package watch

import (
	"time"

	"github.com/netready/netready/pkg/pool"
)

// agentPoll is how often an agent's pool is read: agents send no inotify
// event, and refresh their own counts about this often (Cilium's status
// collector: every 5 s).
const agentPoll = 5 * time.Second

// polled reports whether a watched pool is read rather than watched: an
// agent's, or one whose truth is in the API server. Neither sends an
// inotify event.
func (w *Watcher) polled() bool {
	for _, n := range w.nets {
		if n.Origin() != pool.Folder {
			return true
		}
	}
	return false
}

// deleteSourceSeries drops a network's per-source series once it is no
// longer counted, so that no alert outlives its pool.
func (w *Watcher) deleteSourceSeries(network, source string) {
	for _, state := range []string{"free", "used", "capacity"} {
		w.metrics.PoolAddresses.DeleteLabelValues(network, source, state)
	}
	w.metrics.PoolUnknown.DeleteLabelValues(network, source)
	w.metrics.PoolFull.DeleteLabelValues(network, source)
}

// setAddresses keeps netready_pool_addresses for the range set with the
// fewest free addresses, and netready_pool_cluster_full.
func (w *Watcher) setAddresses(n pool.Network, cnt pool.Count) {
	full := 0.0
	if cnt.ClusterFull && cnt.Unknown == "" {
		full = 1
	}
	w.metrics.PoolFull.WithLabelValues(n.Network, n.Source.Type()).Set(full)
	r, ok := cnt.Tightest()
	if !ok {
		return
	}
	free, _ := r.Free().Float64()
	capacity, _ := r.Usable.Float64()
	src := n.Source.Type()
	w.metrics.PoolAddresses.WithLabelValues(n.Network, src, "free").Set(free)
	w.metrics.PoolAddresses.WithLabelValues(n.Network, src, "used").Set(float64(r.Used))
	w.metrics.PoolAddresses.WithLabelValues(n.Network, src, "capacity").Set(capacity)
}
