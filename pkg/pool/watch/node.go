package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/health"
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
		node, err := w.nodes.GetNode(ctx, w.node)
		if err != nil {
			return fmt.Errorf("get node: %w", err)
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
	node, err := w.nodes.GetNode(ctx, w.node)
	if err != nil {
		return fmt.Errorf("get node: %w", err)
	}
	if len(w.nets) == 0 && len(w.gone) == 0 && !nodewriter.Has(node) && nodewriter.Current(node) == nil {
		return nil // never touched: nothing to say
	}
	line := pool.FormatLine(j.parts)
	if p := nodewriter.SpecPatch(node, want); p != nil {
		if node, err = w.nodes.PatchNode(ctx, w.node, types.MergePatchType, p); err != nil {
			return fmt.Errorf("patch the taint: %w", err)
		}
		w.log.Info("node taint", "taint", nodewriter.Key, "present", want, "pools", line)
		w.recordTaint(node, want, len(j.held) > 0, line)
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
	if p := nodewriter.StatusPatch(node, nodewriter.Condition(want, msg), w.now(), full); p != nil {
		if _, err := w.nodes.PatchNode(ctx, w.node, types.StrategicMergePatchType, p, "status"); err != nil {
			return fmt.Errorf("patch the %s condition: %w", nodewriter.ConditionType, err)
		}
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

// recordTaint records a Node Event for a taint netready put on or took
// off, naming the pools and their counts; held says some pool can't tell
// and kept its last verdict.
func (w *Watcher) recordTaint(node *corev1.Node, on, held bool, pools string) {
	if w.events == nil {
		return
	}
	if on {
		w.events.Eventf(node, nil, corev1.EventTypeWarning, nodewriter.ReasonExhausted, "Taint",
			"netready tainted the node %s:NoSchedule: new pods go to other nodes until an IP pool has room: %s", nodewriter.Key, pools)
		return
	}
	room := "every IP pool has room"
	if held {
		room = "no IP pool is exhausted (one that can't tell keeps its last verdict, room)"
	}
	w.events.Eventf(node, nil, corev1.EventTypeNormal, nodewriter.ReasonAvailable, "Untaint",
		"netready lifted %s: %s: %s", nodewriter.Key, room, pools)
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
		if p := nodewriter.SpecPatch(n, false); p != nil {
			if n, err = nodes.PatchNode(ctx, node, types.MergePatchType, p); err != nil {
				return fmt.Errorf("remove the taint: %w", err)
			}
		}
		if p := nodewriter.RemoveConditionPatch(n); p != nil {
			if _, err := nodes.PatchNode(ctx, node, types.StrategicMergePatchType, p, "status"); err != nil {
				return fmt.Errorf("remove the %s condition: %w", nodewriter.ConditionType, err)
			}
		}
		return nil
	}
	h.SetUnready(healthPart, errors.New("uninstall: the taint is not lifted yet"))
	for backoff := time.Second; ; backoff = min(2*backoff, time.Minute) {
		err := lift()
		if err == nil {
			h.SetUnready(healthPart, nil)
			log.Info("uninstall: the node carries no netready taint or condition", "taint", nodewriter.Key)
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
