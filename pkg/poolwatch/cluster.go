package poolwatch

import (
	"context"
	"fmt"
	"time"

	"github.com/netready/netready/pkg/pool"
)

// ClusterSource counts a pool whose truth is in the API server.
type ClusterSource interface {
	Type() string                         // "calico-ipam", "ovn-kubernetes"
	Count(ctx context.Context) pool.Count // Unknown set (with reason) until its watches have synced or when it cannot tell
}

// ClusterSources returns the ClusterSource of a type, made and started at
// its first call: only a node whose networks need one watches the API
// server for it. An error is a source that cannot be made here.
type ClusterSources func(typ string) (ClusterSource, error)

// clusterBudget bounds one count of a ClusterSource: it counts from its
// watches' caches, in memory.
const clusterBudget = 2 * time.Second

// clusterSyncGrace is how long a ClusterSource that has not counted yet
// (its watches are still listing) holds the taint as it is, neither
// adding nor lifting it, so that a sidecar restart does not lift a taint
// that still applies. After it, cannot tell is cannot tell.
const clusterSyncGrace = 30 * time.Second

// countCluster counts a pool whose truth is in the API server through its
// ClusterSource, and keeps the count for STATUS (pool.WriteVerdict), which
// cannot read the API server. A verdict that cannot be written is logged
// once per cause; STATUS then says it cannot tell. err is set while the
// source has not counted yet, within clusterSyncGrace.
func (w *Watcher) countCluster(n pool.Network) (pool.Count, error) {
	typ := n.Source.Type()
	var cnt pool.Count
	cs, err := w.clusters(typ)
	switch {
	case err != nil:
		cnt = pool.Count{Unknown: err.Error()}
	default:
		ctx, cancel := context.WithTimeout(context.Background(), clusterBudget)
		cnt = cs.Count(ctx)
		cancel()
	}
	now := w.now()
	if _, ok := w.clusterSince[typ]; !ok {
		w.clusterSince[typ] = now
	}
	if cnt.Unknown == "" {
		w.clusterCounted[typ] = true
	}
	werr := pool.WriteVerdict(pool.VerdictPath(n.StateDir, n.Network), typ, cnt, w.now())
	why := ""
	if werr != nil {
		why = werr.Error()
	}
	if w.verdictErr[n.Network] != why {
		w.verdictErr[n.Network] = why
		if werr != nil {
			w.log.Warn("cannot keep the pool's count for STATUS, which will say it cannot tell: mount the plugin's stateDir into the sidecar at the same path", "network", n.Network, "err", werr)
		}
	}
	if err == nil && cnt.Unknown != "" && !w.clusterCounted[typ] && now.Sub(w.clusterSince[typ]) < clusterSyncGrace {
		return cnt, fmt.Errorf("%s has not counted yet (%s): the taint is neither added nor lifted until it has", typ, cnt.Unknown)
	}
	return cnt, nil
}

// noClusterSources is the ClusterSources of a watch told of none.
func noClusterSources(typ string) (ClusterSource, error) {
	return nil, errNoClusterSources{typ}
}

type errNoClusterSources struct{ typ string }

func (e errNoClusterSources) Error() string {
	return "this netready-sidecar cannot count a " + e.typ + " pool: it was started without an API server client for it"
}
