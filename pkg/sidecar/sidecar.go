// Package sidecar owns how netready-sidecar's parts are put together: its
// options and their validation, and Run, which checks that its scope is
// enforced before it writes anything (and holds every write again
// whenever a later check fails), then starts the condition
// controller, the off switch's watch, the pool watch (or an uninstall's lifting of the taint), the
// Cilium propagation meter where asked, the Event recorder and the /metrics, /healthz and /readyz server.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/netready/netready/pkg/conditions"
	"github.com/netready/netready/pkg/health"
	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/offswitch"
	"github.com/netready/netready/pkg/pool/watch"
	"github.com/netready/netready/pkg/propagation"
	"github.com/netready/netready/pkg/scopecheck"
	"github.com/netready/netready/pkg/writegate"
)

// Options are the sidecar's flags.
type Options struct {
	conditions.Config
	Kubeconfig      string
	Listen          string
	CNIConfDir      string
	PoolResync      time.Duration
	PoolForgetAfter time.Duration
	Uninstall       bool
	// RequireScope holds every write until the admission policies that
	// scope the sidecar refuse a dry-run probe (pkg/scopecheck), made as
	// its own pod, PodNamespace/PodName, or, when either is empty, the pod
	// its token is bound to.
	RequireScope          bool
	PodNamespace, PodName string
	// ScopeRecheck is how often at least, with RequireScope, the probes
	// are sent again while the sidecar runs, besides soon after each
	// change to what decides the scope, which it watches
	// (scopecheck.Watch); ScopeRecheckUnwatched applies instead while
	// that watch is not open (each its default when not positive).
	// Until the probes are all refused again, every write is held and
	// /readyz says why.
	ScopeRecheck, ScopeRecheckUnwatched time.Duration
	// ScopeUnknownHold is how long, with RequireScope, every write is
	// held while another admission check refuses every probe of a policy
	// first, so that its scope cannot be told; then the sidecar writes
	// (scopecheck.Prover says why that is safe).
	ScopeUnknownHold time.Duration
	// OffNamespace is the namespace of the off switch's ConfigMap
	// (package offswitch): PodNamespace when empty, else kube-system.
	OffNamespace string
	// MeasureCiliumPropagation is a label selector: where this node's
	// labels match it, the sidecar measures how long this node's
	// cilium-agent takes to learn other nodes' pods (package
	// propagation), asking the agent at CiliumSocket. Empty: off.
	MeasureCiliumPropagation string
	CiliumSocket             string
	// KubeAPIQPS and KubeAPIBurst pace the sidecar's requests, as
	// kubelet's flags of the same names pace its own: a node that starts
	// many gated pods at once (a drain's refill) must not wait on
	// client-go's default of 5 a second.
	KubeAPIQPS   float64
	KubeAPIBurst int
}

// DefaultKubeAPIQPS and DefaultKubeAPIBurst are kubelet's defaults: the
// sidecar sends at most one write per gated pod start (and, with Cilium's
// crossNode, one or two reads of its CiliumEndpoint), so it needs no more
// than kubelet, which writes three per pod start.
const (
	DefaultKubeAPIQPS   = 50
	DefaultKubeAPIBurst = 100
)

// DefaultCiliumSocket is where cilium-agent serves its API.
const DefaultCiliumSocket = "/var/run/cilium/cilium.sock"

// DefaultScopeRecheck bounds how long a running sidecar goes on writing
// after its scope was lifted in a way no watch sees (a webhook, another
// authorizer), and DefaultScopeRecheckUnwatched after any lifting while
// the watch is not open (an install without its RBAC).
const (
	DefaultScopeRecheck          = scopecheck.DefaultPeriod
	DefaultScopeRecheckUnwatched = scopecheck.DefaultUnwatched
)

// scopeWatchWait bounds how long the first scope check waits for the
// watch's first list, so that no change falls between the two.
const scopeWatchWait = 5 * time.Second

// Validate returns every problem at once.
func (o *Options) Validate() error {
	var errs []error
	if !filepath.IsAbs(o.StateDir) {
		errs = append(errs, fmt.Errorf("--state-dir %q must be an absolute path", o.StateDir))
	}
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name (or $NODE_NAME) is required"))
	}
	if msgs := validation.IsQualifiedName(o.ConditionType); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--condition-type %q: %s", o.ConditionType, strings.Join(msgs, "; ")))
	}
	if o.PendingTimeout <= 0 || o.Resync <= 0 || o.PoolResync <= 0 || o.PoolForgetAfter <= 0 {
		errs = append(errs, errors.New("--pending-timeout, --resync, --pool-resync and --pool-forget-after must be positive"))
	}
	if o.CNIConfDir != "" && !filepath.IsAbs(o.CNIConfDir) {
		errs = append(errs, fmt.Errorf("--cni-conf-dir %q must be an absolute path", o.CNIConfDir))
	}
	if o.Workers < 1 {
		errs = append(errs, errors.New("--workers must be at least 1"))
	}
	if o.UnobservedGrace < 0 {
		errs = append(errs, errors.New("--unobserved-grace must not be negative"))
	}
	if o.Unobserved != conditions.UnobservedReady && o.Unobserved != conditions.UnobservedNotReady {
		errs = append(errs, fmt.Errorf("--unobserved %q must be %q or %q", o.Unobserved, conditions.UnobservedReady, conditions.UnobservedNotReady))
	}
	if !(o.KubeAPIQPS > 0) || math.IsInf(o.KubeAPIQPS, 1) || o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps %g and --kube-api-burst %d must be positive and finite", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	if o.ScopeUnknownHold < 0 {
		errs = append(errs, errors.New("--scope-unknown-hold must not be negative (0 writes at once when the scope cannot be told)"))
	}
	if o.MeasureCiliumPropagation != "" {
		sel, err := labels.Parse(o.MeasureCiliumPropagation)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--measure-cilium-propagation %q is not a label selector (such as netready.io/measure-cilium-propagation=true): %w", o.MeasureCiliumPropagation, err))
		case !selectsSome(sel):
			// A blank or only-negative selector matches every node: each
			// would watch every CiliumEndpoint of the cluster.
			errs = append(errs, fmt.Errorf("--measure-cilium-propagation %q would select every node without the label: name a label the measuring nodes have, such as netready.io/measure-cilium-propagation=true", o.MeasureCiliumPropagation))
		}
		if !filepath.IsAbs(o.CiliumSocket) {
			errs = append(errs, fmt.Errorf("--cilium-socket %q must be the absolute path of cilium-agent's API socket", o.CiliumSocket))
		} else if _, err := propagation.NewSocketAgent(o.CiliumSocket); err != nil {
			errs = append(errs, fmt.Errorf("--cilium-socket %q: %w", o.CiliumSocket, err))
		}
	}
	if o.NotInEffectHoldMax < 0 || o.NotInEffectHoldMax > conditions.MaxNotInEffectHold {
		errs = append(errs, fmt.Errorf("--not-in-effect-hold-max %s must be from 0 (holds no pod) to %s: where netready is not in effect, a pod must not wait on it for longer", o.NotInEffectHoldMax, conditions.MaxNotInEffectHold))
	}
	return errors.Join(errs...)
}

// Run runs the sidecar until ctx ends or a part fails for good.
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	cfg, err := kubeapi.RESTConfig(o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("no Kubernetes client config: %w", err)
	}
	cfg.UserAgent = "netready-sidecar"
	cfg.QPS, cfg.Burst = float32(o.KubeAPIQPS), o.KubeAPIBurst
	// Every client below writes through gate: closed until the scope is
	// proved, and again whenever a re-check fails.
	gate := writegate.New(errors.New("the scope check has not passed yet"), kubeapi.Timeout)
	if o.RequireScope {
		cfg.Wrap(gate.Wrap)
	} else {
		gate.Open()
	}
	client, err := kubeapi.NewREST(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	recorder := kubeapi.NewRecorder(client, o.NodeName, log)
	go recorder.Run(ctx)

	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	c := conditions.New(o.Config, client, recorder, log, m)
	h := health.New()
	srv := &http.Server{Addr: o.Listen, Handler: mux(c, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), h), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			served <- fmt.Errorf("http: %w", err)
			stop()
		}
	}()
	defer srv.Close()
	if o.RequireScope {
		prover := newProver(o, client, gate, h, recorder, log)
		var w *scopecheck.Watch
		self := func(sctx context.Context) (scopecheck.Self, error) {
			me, err := selfFunc(o, client)(sctx)
			if err == nil && w == nil {
				w = scopecheck.NewWatch(client, me, o.timing().Period, log)
				go w.Run(ctx)
				wctx, cancel := context.WithTimeout(sctx, scopeWatchWait)
				w.WaitFirst(wctx)
				cancel()
			}
			return me, err
		}
		me, err := prover.Wait(ctx, self)
		if err != nil {
			return nil // ctx ended before the sidecar could write: shut down
		}
		var trig scopecheck.Trigger
		if w != nil {
			trig = w
		}
		go prover.Keep(ctx, me, o.timing(), trig)
	}
	if o.Uninstall || o.CNIConfDir != "" {
		// Its own client and rate budget: the Node's writes never queue
		// pod publishing, and a Node that cannot be read (404, retried
		// with backoff) never slows pod patches to the Node's retry pace
		// (BenchmarkPublishLatency).
		nodeClient, err := kubeapi.NewREST(cfg)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		if o.Uninstall {
			go nodewriter.LiftAll(ctx, nodeClient, o.NodeName, log, h)
		} else {
			pc := watch.Config{ConfDir: o.CNIConfDir, Node: o.NodeName, Resync: o.PoolResync, ForgetAfter: o.PoolForgetAfter,
				Clusters: watch.FromAPIServer(ctx, cfg, o.NodeName, log)}
			go watch.New(pc, nodeClient, recorder, log, m, h).Run(ctx)
		}
	}
	go offswitch.Watch(ctx, client, o.offNamespace(), o.StateDir, c.SetOff, log)
	if o.MeasureCiliumPropagation != "" && !o.Uninstall {
		// Measuring is an extra: whatever stops it never stops the
		// sidecar, whose conditions do not depend on it.
		if err := startMeter(ctx, o, client, m, log); err != nil {
			log.Warn("not measuring Cilium propagation", "err", err)
		}
	}
	err = c.Run(ctx)
	select {
	case err := <-served:
		return err
	default:
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// startMeter starts the Cilium propagation meter, which never touches
// conditions: it only reads, and only exports metrics.
func startMeter(ctx context.Context, o Options, client *kubeapi.REST, m *metrics.Metrics, log *slog.Logger) error {
	sel, err := labels.Parse(o.MeasureCiliumPropagation)
	if err != nil {
		return fmt.Errorf("--measure-cilium-propagation: %w", err)
	}
	agent, err := propagation.NewSocketAgent(o.CiliumSocket)
	if err != nil {
		return fmt.Errorf("--cilium-socket: %w", err)
	}
	go propagation.New(propagation.DefaultConfig(o.NodeName, sel), client, agent, m, log.With("part", "cilium-propagation")).Run(ctx)
	return nil
}

// selectsSome: sel has a requirement that a node without any label fails
// (Exists, =, in), so it cannot pick every node by a typo.
func selectsSome(sel labels.Selector) bool {
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In, selection.Exists, selection.GreaterThan, selection.LessThan:
			return true
		}
	}
	return false
}

// offNamespace is where the off switch's ConfigMap is looked for.
func (o *Options) offNamespace() string {
	switch {
	case o.OffNamespace != "":
		return o.OffNamespace
	case o.PodNamespace != "":
		return o.PodNamespace
	}
	return "kube-system"
}

// timing is when the scope is checked again while the sidecar runs.
func (o *Options) timing() scopecheck.Timing {
	t := scopecheck.DefaultTiming()
	if o.ScopeRecheck > 0 {
		t.Period = o.ScopeRecheck
	}
	if o.ScopeRecheckUnwatched > 0 {
		t.Unwatched = o.ScopeRecheckUnwatched
	}
	return t
}

// mux serves /metrics, /healthz (h) and /readyz (the controller ready and
// nothing h waits for).
func mux(c *conditions.Controller, metricsHandler http.Handler, h *health.Health) *http.ServeMux {
	m := http.NewServeMux()
	m.Handle("/metrics", metricsHandler)
	m.Handle("/healthz", h)
	m.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		// h first: while the scope check waits, the controller has not
		// started, and h says why.
		if why := h.UnreadyReason(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		if !c.Ready() {
			http.Error(w, "pod cache not synced or markers not read yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
		// Ready, but not as it should be (writing on an unknown scope).
		if notes := h.Notes(); notes != "" {
			fmt.Fprintln(w, notes)
		}
	})
	return m
}
