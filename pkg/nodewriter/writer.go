package nodewriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/health"
	"github.com/netready/netready/pkg/kubeapi"
)

// Writer writes on the sidecar's own Node: netready's taint, the
// condition saying why, the Events when the taint goes on and comes off,
// and the Node's Warning Events (warnings.go).
type Writer struct {
	nodes  kubeapi.Client
	events kubeapi.EventRecorder // nil records none
	node   string
	log    *slog.Logger
}

// New returns the writer of node's taint, condition and Events.
func New(nodes kubeapi.Client, events kubeapi.EventRecorder, node string, log *slog.Logger) *Writer {
	return &Writer{nodes: nodes, events: events, node: node, log: log}
}

// Get reads the Node.
func (w *Writer) Get(ctx context.Context) (*corev1.Node, error) {
	node, err := w.nodes.GetNode(ctx, w.node)
	if err != nil {
		return nil, fmt.Errorf("get node: %w", err)
	}
	return node, nil
}

// SetTaint puts the taint on node (want) or takes it off, and records an
// Event naming the pools; held says some pool can't tell and kept its
// last verdict. It returns the Node as written, or node when it already
// showed what is wanted.
func (w *Writer) SetTaint(ctx context.Context, node *corev1.Node, want, held bool, pools string) (*corev1.Node, error) {
	p := SpecPatch(node, want)
	if p == nil {
		return node, nil
	}
	node, err := w.nodes.PatchNode(ctx, w.node, types.MergePatchType, p)
	if err != nil {
		return nil, fmt.Errorf("patch the taint: %w", err)
	}
	w.log.Info("node taint", "taint", Key, "present", want, "pools", pools)
	w.recordTaint(node, want, held, pools)
	return node, nil
}

// SetCondition sets the condition on node, short or not, saying message.
// messageToo says whether a change of message alone is worth a write
// (StatusPatch).
func (w *Writer) SetCondition(ctx context.Context, node *corev1.Node, short bool, message string, now time.Time, messageToo bool) error {
	p := StatusPatch(node, Condition(short, message), now, messageToo)
	if p == nil {
		return nil
	}
	if _, err := w.nodes.PatchNode(ctx, w.node, types.StrategicMergePatchType, p, "status"); err != nil {
		return fmt.Errorf("patch the %s condition: %w", ConditionType, err)
	}
	return nil
}

// recordTaint records a Node Event for a taint netready put on or took
// off, naming the pools and their counts; held says some pool can't tell
// and kept its last verdict.
func (w *Writer) recordTaint(node *corev1.Node, on, held bool, pools string) {
	if w.events == nil {
		return
	}
	if on {
		w.events.Eventf(node, nil, corev1.EventTypeWarning, ReasonExhausted, "Taint",
			"netready tainted the node %s:NoSchedule: new pods go to other nodes until an IP pool has room: %s", Key, pools)
		return
	}
	room := "every IP pool has room"
	if held {
		room = "no IP pool is exhausted (one that can't tell keeps its last verdict, room)"
	}
	w.events.Eventf(node, nil, corev1.EventTypeNormal, ReasonAvailable, "Untaint",
		"netready lifted %s: %s: %s", Key, room, pools)
}

// liftPart is the name in /healthz of what an uninstall stands in for:
// the pool watch.
const liftPart = "pool watch"

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
		if p := SpecPatch(n, false); p != nil {
			if n, err = nodes.PatchNode(ctx, node, types.MergePatchType, p); err != nil {
				return fmt.Errorf("remove the taint: %w", err)
			}
		}
		if p := RemoveConditionPatch(n); p != nil {
			if _, err := nodes.PatchNode(ctx, node, types.StrategicMergePatchType, p, "status"); err != nil {
				return fmt.Errorf("remove the %s condition: %w", ConditionType, err)
			}
		}
		return nil
	}
	h.SetUnready(liftPart, errors.New("uninstall: the taint is not lifted yet"))
	for backoff := time.Second; ; backoff = min(2*backoff, time.Minute) {
		err := lift()
		if err == nil {
			h.SetUnready(liftPart, nil)
			log.Info("uninstall: the node carries no netready taint or condition", "taint", Key)
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

// Reasons of the Warning Events the pool watch raises about the Node.
const (
	// ReasonPoolUnknown is for a pool netready cannot tell about: its
	// agent does not answer, answers what netready cannot read, or gives
	// no capacity. Such a pool neither adds nor lifts the taint: its last
	// verdict stands.
	ReasonPoolUnknown = "NetreadyPoolUnknown"
	// ReasonStatusInactive is for a runtime config whose cniVersion means
	// STATUS and GC are never called.
	ReasonStatusInactive = "NetreadyStatusInactive"
)

// Warns reports whether Warn records anything: false without an Event
// recorder.
func (w *Writer) Warns() bool { return w.events != nil }

// Warn records a Warning Event about the Node, for reason, by action
// ("Count", "Check"), which kubectl netready status shows.
func (w *Writer) Warn(reason, action, format string, args ...any) {
	if w.events == nil {
		return
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.node, UID: types.UID(w.node)}}
	w.events.Eventf(node, nil, corev1.EventTypeWarning, reason, action, format, args...)
}
