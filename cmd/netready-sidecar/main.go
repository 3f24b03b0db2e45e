// Command netready-sidecar is netready's node agent: it publishes the
// plugin's readiness markers as a condition on each pod, for readiness
// gates (KEP-580, KEP-5709), and goes on with the checks of attachments
// whose ADD gave up waiting.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/utils/buildversion"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/netready/netready/pkg/publish"
)

// What to do with gated pods that have no marker (--unobserved).
const (
	unobservedReady    = "ready"
	unobservedNotReady = "notready"
)

type options struct {
	StateDir        string
	NodeName        string
	ConditionType   string
	Kubeconfig      string
	Listen          string
	PendingTimeout  time.Duration
	Resync          time.Duration
	Workers         int
	UnobservedGrace time.Duration
	Unobserved      string
	CNIConfDir      string
	PoolResync      time.Duration
	PoolForgetAfter time.Duration
	Uninstall       bool
}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var o options
	fs := flag.NewFlagSet("netready-sidecar", flag.ContinueOnError)
	fs.StringVar(&o.StateDir, "state-dir", "/run/netready", "the plugin's stateDir")
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.ConditionType, "condition-type", publish.DefaultConditionType, "the pod condition to set")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:9095", "address for /metrics, /healthz and /readyz")
	fs.DurationVar(&o.PendingTimeout, "pending-timeout", 10*time.Minute, "how long after ADD a pending attachment is re-checked at full pace; after it, re-checks back off to one a minute and a Warning Event says so")
	fs.DurationVar(&o.Resync, "resync", 5*time.Minute, "re-read every marker this often, besides inotify")
	fs.IntVar(&o.Workers, "workers", 4, "pods published in parallel")
	fs.DurationVar(&o.UnobservedGrace, "unobserved-grace", 30*time.Second, "how long a gated pod's sandbox may be up with no marker before it counts as not observed")
	fs.StringVar(&o.Unobserved, "unobserved", unobservedReady, "gated pods netready never saw: ready (condition True, reason NotObserved, Warning Event) or notready (keep them False)")
	fs.StringVar(&o.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "the node's CNI config folder, read-only: pools of entries with status.ipam are watched there, and with poolAction taint a short pool taints the node; empty turns the pool watch off")
	fs.DurationVar(&o.PoolResync, "pool-resync", time.Minute, "count every pool and compare with the Node this often, besides inotify")
	fs.DurationVar(&o.PoolForgetAfter, "pool-forget-after", 30*time.Second, "how long a network whose netready entry left the CNI config (a vendor's rewrite) is still counted, keeping its taint and hysteresis")
	fs.BoolVar(&o.Uninstall, "uninstall", false, "netready is being removed: take its taint and NetworkPoolExhausted condition off this node (/readyz waits for it) and watch no pool; markers still on the node are still published")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("netready-sidecar " + buildversion.BuildVersion)
		return 0
	}
	if err := o.Validate(); err != nil {
		log.Error("invalid options", "err", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 2
	}
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		log.Error("no Kubernetes client config", "err", err)
		return 1
	}
	cfg.UserAgent = "netready-sidecar"
	client, err := newRESTKube(cfg)
	if err != nil {
		log.Error("Kubernetes client", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	recorder := newRecorder(client, o.NodeName, log)
	go recorder.run(ctx)

	reg := prometheus.NewRegistry()
	c := newController(o, client, recorder, log, newMetrics(reg))
	h := newHealth()
	srv := &http.Server{Addr: o.Listen, Handler: c.mux(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), h), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http", "err", err)
			stop()
		}
	}()
	defer srv.Close()
	if o.Uninstall || o.CNIConfDir != "" {
		// Its own client and rate budget: the Node's writes never queue
		// pod publishing. Sharing one client, a Node that could not be
		// read (404, retried with backoff) slowed every pod patch to one
		// per 200 ms (BenchmarkPublishLatency: p50 7 -> 194 ms).
		nodeClient, err := newRESTKube(cfg)
		if err != nil {
			log.Error("Kubernetes client", "err", err)
			return 1
		}
		if o.Uninstall {
			go liftAll(ctx, nodeClient, o.NodeName, log, h)
		} else {
			go newPoolWatcher(o, nodeClient, recorder, log, c.metrics, h).run(ctx)
		}
	}
	if err := c.run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("failed", "err", err)
		return 1
	}
	return 0
}

// Validate returns every problem at once.
func (o *options) Validate() error {
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
	if o.Unobserved != unobservedReady && o.Unobserved != unobservedNotReady {
		errs = append(errs, fmt.Errorf("--unobserved %q must be %q or %q", o.Unobserved, unobservedReady, unobservedNotReady))
	}
	return errors.Join(errs...)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
