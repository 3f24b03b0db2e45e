// Package propagation owns measuring how long after a remote pod's
// CiliumEndpoint reaches this node its own cilium-agent's ipcache holds
// it: issue #52's measured propagation, for Cilium, which has no barrier
// that would say when the other nodes have learned a pod. It watches
// every CiliumEndpoint of the cluster from "now" (no informer store),
// and for each of a pod on another node that has a final identity and an
// IP, polls this node's agent until its ipcache maps the IP to that
// identity, and observes the time in netready_cilium_propagation_seconds.
//
// It runs only where the Node's labels match a selector, read when it
// starts and whenever its watch starts again; a change of the labels
// takes effect then, or at the next restart of the sidecar.
package propagation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/metrics"
)

// Source is what the meter reads from the API server; kubeapi.REST is
// one.
type Source interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	ListCiliumEndpoints(ctx context.Context, opts metav1.ListOptions) (*kubeapi.CiliumEndpointList, error)
	WatchCiliumEndpoints(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Config is what the meter measures and how hard it tries.
type Config struct {
	// Node is this node's name; Selector must match its labels.
	Node     string
	Selector labels.Selector
	// InFlight bounds the measurements under way; an event beyond it is
	// counted as busy.
	InFlight int
	// GiveUp is how long after the event a measurement waits for the
	// agent before it is counted as timeout (or agent, when the agent
	// did not answer).
	GiveUp time.Duration
	// The agent is asked again after PollMin, doubling to PollMax: the
	// resolution is fine where the agent is quick, the cost small where
	// it is slow.
	PollMin, PollMax time.Duration
	// Recheck is how often the Node's labels are read again while they
	// do not match, and the pause after the API server refused the list
	// or the watch (RBAC).
	Recheck time.Duration
	// RetryMin and RetryMax bound the backoff after other failures.
	RetryMin, RetryMax time.Duration
	// WatchTimeout bounds each watch request; RetryWatcher resumes it.
	WatchTimeout time.Duration
}

// DefaultConfig is the meter's configuration for node with sel.
func DefaultConfig(node string, sel labels.Selector) Config {
	return Config{Node: node, Selector: sel, InFlight: 64, GiveUp: 30 * time.Second,
		PollMin: 2 * time.Millisecond, PollMax: 100 * time.Millisecond,
		Recheck: 5 * time.Minute, RetryMin: time.Second, RetryMax: time.Minute, WatchTimeout: 10 * time.Minute}
}

// Meter measures on one node.
type Meter struct {
	cfg   Config
	src   Source
	agent Agent
	m     *metrics.Metrics
	log   *slog.Logger
	// said is the last reason not to measure that was logged, so that
	// one that lasts is logged once.
	said string
}

// New makes the meter; Run measures.
func New(cfg Config, src Source, agent Agent, m *metrics.Metrics, log *slog.Logger) *Meter {
	return &Meter{cfg: cfg, src: src, agent: agent, m: m, log: log}
}

// Why a session ended, besides other errors.
var (
	errNotSelected = errors.New("this node's labels do not match --measure-cilium-propagation")
	errForbidden   = errors.New("forbidden: give the sidecar's ClusterRole list and watch on ciliumendpoints.cilium.io (the chart's netready-sidecar-cilium does with the propagation meter on)")
	errExpired     = errors.New("the CiliumEndpoint watch expired (410)")
	errWatchEnded  = errors.New("the CiliumEndpoint watch ended without saying why")
)

// Run measures until ctx ends. It never fails: whatever stops it from
// measuring is logged once, and tried again later.
func (m *Meter) Run(ctx context.Context) {
	for _, r := range []string{metrics.UnmeasuredBusy, metrics.UnmeasuredTimeout, metrics.UnmeasuredAgent} {
		m.m.CiliumPropagationUnmeasured.WithLabelValues(r)
	}
	l := newLoop(m.cfg, m.agent, m.m)
	defer l.wait()
	backoff := m.cfg.RetryMin
	for {
		start := time.Now()
		err := m.session(ctx, l)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > m.cfg.RetryMax {
			backoff = m.cfg.RetryMin // it ran for a while: not a failing loop
		}
		pause := backoff
		switch {
		case errors.Is(err, errNotSelected), errors.Is(err, errForbidden):
			pause = m.cfg.Recheck
		case errors.Is(err, errExpired):
			// Expected now and then: list again soon, but never in a loop.
			pause = m.cfg.RetryMin
		default:
			backoff = min(2*backoff, m.cfg.RetryMax)
		}
		m.say(err, pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// say logs why the meter does not measure, once while it stays the same.
func (m *Meter) say(err error, pause time.Duration) {
	if err == nil {
		// RetryWatcher closes its channel without an ERROR event on
		// an error it cannot type (a wrapped 403 after a retry, say).
		err = errWatchEnded
	}
	why := err.Error()
	if why == m.said {
		return
	}
	m.said = why
	switch {
	case errors.Is(err, errNotSelected):
		m.log.Info("not measuring Cilium propagation", "why", why, "recheck", pause)
	case errors.Is(err, errExpired):
		m.log.Info("measuring Cilium propagation again from now", "why", why)
	default:
		m.log.Warn("not measuring Cilium propagation; conditions are not affected", "err", why, "retryIn", pause)
	}
}

// session reads the Node's labels and the agent's own addresses, lists
// to learn "now", and measures what the watch from there delivers, until
// the watch ends.
func (m *Meter) session(ctx context.Context, l *loop) error {
	rctx, cancel := context.WithTimeout(ctx, kubeapi.Timeout)
	node, err := m.src.GetNode(rctx, m.cfg.Node)
	cancel()
	if err != nil {
		return m.apiError(fmt.Errorf("read Node %s for its labels: %w", m.cfg.Node, err))
	}
	if !m.cfg.Selector.Matches(labels.Set(node.Labels)) {
		return fmt.Errorf("%w (%q)", errNotSelected, m.cfg.Selector.String())
	}
	ips, err := m.agent.NodeIPs(ctx)
	if err != nil {
		return fmt.Errorf("ask this node's cilium-agent for its own addresses: %w", err)
	}
	// One item is enough: the list is only asked for its resourceVersion,
	// so that nothing that exists already is measured.
	rctx, cancel = context.WithTimeout(ctx, kubeapi.Timeout)
	list, err := m.src.ListCiliumEndpoints(rctx, metav1.ListOptions{Limit: 1})
	cancel()
	if err != nil {
		return m.apiError(err)
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, watcherFunc(func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		timeout := int64(m.cfg.WatchTimeout.Seconds())
		opts.TimeoutSeconds = &timeout
		return m.src.WatchCiliumEndpoints(ctx, opts)
	}))
	if err != nil {
		return fmt.Errorf("watch CiliumEndpoints from resourceVersion %q: %w", list.ResourceVersion, err)
	}
	defer rw.Stop()
	if m.said != "" || l.sessions == 0 {
		m.log.Info("measuring Cilium propagation", "node", m.cfg.Node, "nodeIPs", ips, "resourceVersion", list.ResourceVersion)
	}
	m.said = ""
	// Endpoints remembered as added without an identity: their DELETE
	// may have fallen between the old watch and this one.
	clear(l.fresh)
	l.self = map[netip.Addr]bool{}
	for _, ip := range ips {
		l.self[ip] = true
	}
	l.sessions++
	return m.apiError(l.run(ctx, rw.ResultChan()))
}

// apiError counts err under netready_api_errors_total and names a refusal
// as the missing RBAC.
func (m *Meter) apiError(err error) error {
	switch {
	case err == nil, errors.Is(err, errExpired), errors.Is(err, context.Canceled):
		return err
	case apierrors.IsForbidden(err):
		m.m.APIErrors.WithLabelValues(kubeapi.Reason(err)).Inc()
		return fmt.Errorf("%w: %v", errForbidden, err)
	}
	m.m.APIErrors.WithLabelValues(kubeapi.Reason(err)).Inc()
	return err
}

// watcherFunc is a cache.WatcherWithContext, for RetryWatcher.
type watcherFunc func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)

func (f watcherFunc) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return f(ctx, opts)
}
