package watch

import (
	"context"

	"github.com/fsnotify/fsnotify"

	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
)

// reconcile counts every pool and, when the verdict differs from what the
// node shows (or on a full round), reads the node and patches it.
func (w *Watcher) reconcile(ctx context.Context, fsw *fsnotify.Watcher, full bool) error {
	ctx, cancel := context.WithTimeout(ctx, kubeapi.Timeout)
	defer cancel()
	if w.seeded == nil {
		// The node's taint seeds the hysteresis before the first count.
		node, err := w.nodes.Get(ctx)
		if err != nil {
			return err
		}
		has := nodewriter.Has(node)
		w.seeded, w.applied = &has, &has
		w.setTainted(has)
		full = true
	}
	j := w.judge(fsw, full)
	// A change of the config folder is rare, and changes what the
	// condition says beyond counts: write it as on a full round. So does
	// a pool that begins or ends to hold its verdict.
	held := heldKey(j.held)
	full = full || j.reloaded || held != w.heldSaid
	want := j.short
	if !want && j.unsure && *w.applied {
		want = true // lift it only on a clean count
	}
	if !full && want == *w.applied {
		return nil
	}
	node, err := w.nodes.Get(ctx)
	if err != nil {
		return err
	}
	if len(w.nets) == 0 && len(w.gone) == 0 && !nodewriter.Has(node) && nodewriter.Current(node) == nil {
		return nil // never touched: nothing to say
	}
	line := pool.FormatLine(j.parts)
	if node, err = w.nodes.SetTaint(ctx, node, want, len(j.held) > 0, line); err != nil {
		return err
	}
	has := nodewriter.Has(node)
	w.applied = &has
	w.setTainted(has)
	msg := line
	if len(w.nets) == 0 && len(w.gone) == 0 {
		msg = "no network on this node has a pool netready watches"
	}
	// The message alone is rewritten only on full rounds: counts move with
	// every pod, and every write to a Node reaches every watcher of nodes.
	if err := w.nodes.SetCondition(ctx, node, want, msg, w.now(), full); err != nil {
		return err
	}
	w.heldSaid = held
	return nil
}

func (w *Watcher) setTainted(has bool) {
	v := 0.0
	if has {
		v = 1
	}
	w.metrics.Tainted.Set(v)
}
