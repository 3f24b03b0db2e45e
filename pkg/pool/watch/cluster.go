package watch

import (
	"context"
	"time"

	"github.com/netready/netready/pkg/pool"
)

// ClusterSource counts a pool whose truth is in the API server.
type ClusterSource interface {
	Type() string // "calico-ipam", "ovn-kubernetes"
	// Count counts what scope names of the node's pool. Unknown is set
	// (with a reason) until its watches have synced, or when it cannot tell.
	Count(ctx context.Context, scope pool.Scope) pool.Count
	// Syncing is true while its first reads have neither finished nor
	// failed for a reason that retrying does not cure (RBAC, a missing
	// CRD): its cannot tell is not yet an answer.
	Syncing() bool
}

// ClusterSources returns the ClusterSource of a type, made and started at
// its first call: only a node whose networks need one watches the API
// server for it. An error is a source that cannot be made here. A source
// that is a Releaser is released once no network counts from it.
type ClusterSources func(typ string) (ClusterSource, error)

// clusterBudget bounds one count of a ClusterSource: it counts from its
// watches' caches, in memory.
const clusterBudget = 2 * time.Second

// clusterSyncLimit bounds how long a ClusterSource that is still syncing
// (its watches listing, as after a sidecar restart) leaves STATUS's last
// verdict as it is, and records no Event. A list of thousands of blocks
// takes seconds; one that takes longer than this is a failure: the
// verdict then says can't tell, and the Event says why. The taint is held
// as it was either way, for as long as the source cannot tell.
const clusterSyncLimit = 5 * time.Minute

// syncingError is the count of a ClusterSource still syncing, within
// clusterSyncLimit.
type syncingError struct{ typ, why string }

func (e syncingError) Error() string { return e.typ + " has not counted yet (" + e.why + ")" }

// countCluster counts a pool whose truth is in the API server through its
// ClusterSource, and keeps the count for STATUS (pool.WriteVerdict), which
// cannot read the API server. A verdict that cannot be written is logged
// once per cause; STATUS then says it cannot tell. While the source is
// still syncing (within clusterSyncLimit), err is a syncingError and no
// verdict is written: STATUS's last verdict stands until it can answer,
// and ages out by itself (pool.VerdictMaxAge).
func (w *Watcher) countCluster(n pool.Network) (pool.Count, error) {
	typ := n.Source.Type()
	cs, err := w.clusters(typ)
	if err != nil {
		cnt := pool.Count{Unknown: err.Error()}
		w.keepVerdict(n, typ, cnt)
		return cnt, nil
	}
	w.made[typ] = cs
	ctx, cancel := context.WithTimeout(context.Background(), clusterBudget)
	cnt := cs.Count(ctx, pool.ScopeOf(n.Source))
	cancel()
	now := w.now()
	if _, ok := w.clusterSince[typ]; !ok {
		w.clusterSince[typ] = now
	}
	if cnt.Unknown != "" && cs.Syncing() && now.Sub(w.clusterSince[typ]) < clusterSyncLimit {
		return cnt, syncingError{typ, cnt.Unknown}
	}
	w.keepVerdict(n, typ, cnt)
	return cnt, nil
}

// keepVerdict writes cnt as the network's verdict for STATUS, logging a
// failure once per cause.
func (w *Watcher) keepVerdict(n pool.Network, typ string, cnt pool.Count) {
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
}

// noClusterSources is the ClusterSources of a watch told of none.
func noClusterSources(typ string) (ClusterSource, error) {
	return nil, errNoClusterSources{typ}
}

type errNoClusterSources struct{ typ string }

func (e errNoClusterSources) Error() string {
	return "this netready-sidecar cannot count a " + e.typ + " pool: it was started without an API server client for it"
}
