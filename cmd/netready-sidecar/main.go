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
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/utils/buildversion"

	"github.com/netready/netready/pkg/conditions"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/pkg/scopecheck"
	"github.com/netready/netready/pkg/sidecar"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	var o sidecar.Options
	fs := flag.NewFlagSet("netready-sidecar", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.StateDir, "state-dir", "/run/netready", "the plugin's stateDir")
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.ConditionType, "condition-type", publish.DefaultConditionType, "the pod condition to set")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:9095", "address for /metrics, /healthz and /readyz")
	fs.DurationVar(&o.PendingTimeout, "pending-timeout", 10*time.Minute, "how long after ADD a pending attachment is re-checked at full pace; after it, re-checks back off to one a minute and a Warning Event says so")
	fs.DurationVar(&o.Resync, "resync", 5*time.Minute, "re-read every marker this often, besides inotify")
	fs.IntVar(&o.Workers, "workers", 4, "pods published in parallel")
	fs.DurationVar(&o.UnobservedGrace, "unobserved-grace", 30*time.Second, "how long a gated pod's sandbox may be up with no marker before it counts as not observed")
	fs.StringVar(&o.Unobserved, "unobserved", conditions.UnobservedReady, "gated pods netready never saw: ready (condition True, reason NotObserved, Warning Event) or notready (keep them False)")
	fs.DurationVar(&o.NotInEffectHoldMax, "not-in-effect-hold-max", time.Minute, "where netready is not in effect, at most this long (0 to 2m; 0 holds none) before a gated pod is judged as --unobserved says, with a Warning Event naming why: while netready-install backs off from an agent that keeps removing its entry, a pod with no marker whose sandbox came up since is kept not ready this long after its sandbox came up, whatever --unobserved says; a pod whose pending markers wait only on a preset whose agent never wrote on this node (NetreadyPresetNotWriting), this long after its ADD began")
	fs.DurationVar(&o.NotInEffectHoldMax, "install-backoff-hold-max", time.Minute, "the former name of --not-in-effect-hold-max")
	fs.StringVar(&o.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "the node's CNI config folder, read-only: pools of entries with status.ipam are watched there, and with poolAction taint a short pool taints the node; empty turns the pool watch off")
	fs.DurationVar(&o.PoolResync, "pool-resync", time.Minute, "count every pool and compare with the Node this often, besides inotify")
	fs.DurationVar(&o.PoolForgetAfter, "pool-forget-after", 30*time.Second, "how long a network whose netready entry left the CNI config (a vendor's rewrite) is still counted, keeping its taint and hysteresis")
	fs.BoolVar(&o.Uninstall, "uninstall", false, "netready is being removed: take its taint and NetworkPoolExhausted condition off this node (/readyz waits for it) and watch no pool; markers still on the node are still published")
	fs.BoolVar(&o.RequireScope, "require-scope", true, "write nothing until the admission policies that keep the sidecar to its own condition on its own node's pods refuse a dry-run write (/readyz says why it waits); false only where ValidatingAdmissionPolicy cannot run (before Kubernetes 1.30), scoped by RBAC alone")
	fs.DurationVar(&o.ScopeRecheck, "scope-recheck", sidecar.DefaultScopeRecheck, "with --require-scope, send the scope check's dry-run probes again at least this often while running, besides a few seconds after each change to the admission policies, their bindings or the RBAC of the sidecar's identity, which it watches; until they are all refused again every write is held and /readyz names the policies")
	fs.DurationVar(&o.ScopeRecheckUnwatched, "scope-recheck-unwatched", sidecar.DefaultScopeRecheckUnwatched, "with --require-scope, send the probes this often instead (at most --scope-recheck) while that watch is not open: the sidecar's ClusterRole lacks list and watch on them (an install from before them), or the API server is unreachable")
	fs.DurationVar(&o.ScopeUnknownHold, "scope-unknown-hold", scopecheck.DefaultUnknownHold, "with --require-scope, while another admission policy or webhook refuses every dry-run probe of one of netready's policies first, so that whether it is in force cannot be told, hold every write this long, then write (/readyz and a Warning Event name that check); 0 writes at once")
	fs.StringVar(&o.PodNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "the sidecar's own pod's namespace, for --require-scope (default $POD_NAMESPACE; without it, the pod its token is bound to)")
	fs.StringVar(&o.PodName, "pod-name", os.Getenv("POD_NAME"), "the sidecar's own pod's name, for --require-scope (default $POD_NAME; without it, the pod its token is bound to)")
	fs.StringVar(&o.OffNamespace, "off-switch-namespace", "", "the namespace of the off switch, the ConfigMap netready-off (kubectl netready off): while it exists every gated pod of the node is released (True, reason NetreadyOff) and ADD waits on no check (default: --pod-namespace, else kube-system)")
	fs.StringVar(&o.MeasureCiliumPropagation, "measure-cilium-propagation", "", "a label selector (such as netready.io/measure-propagation=true); where this node's Node labels match it (read at start and whenever the watch starts again), measure how long after the sidecar receives a pod's CiliumEndpoint (a pod on another node: a new IP or identity) this node's cilium-agent ipcache maps its IP to that identity, as netready_cilium_propagation_seconds. The cost: a measuring node's sidecar receives every CiliumEndpoint event of the cluster, as one more cilium-agent would, and asks its agent a few times per event, so measure on a few nodes. Needs list and watch on ciliumendpoints.cilium.io. Empty (the default) turns it off; conditions never depend on it")
	fs.StringVar(&o.CiliumSocket, "cilium-socket", sidecar.DefaultCiliumSocket, "cilium-agent's API socket, for --measure-cilium-propagation (the sidecar needs it mounted)")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", sidecar.DefaultKubeAPIQPS, "requests a second to the API server at most, as kubelet's flag of the same name (and its default); a burst of gated pod starts is published at this pace")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", sidecar.DefaultKubeAPIBurst, "requests sent at once above --kube-api-qps, as kubelet's flag of the same name (and its default)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	usage := func(w io.Writer) {
		fs.SetOutput(w)
		fmt.Fprintln(w, "Usage of netready-sidecar:")
		fs.PrintDefaults()
	}
	fs.Usage = func() {} // printed below, where it belongs
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		// Asked for: the usage is the answer, on stdout, and no error.
		usage(stdout)
		return 0
	case err != nil:
		usage(stderr)
		return 2
	case fs.NArg() > 0:
		// Go's flags stop at the first word that is not one: "--require-scope
		// false" is --require-scope and a stray "false", never to be ignored.
		fmt.Fprintf(stderr, "netready-sidecar: unexpected argument %q: it takes flags only, and a true/false flag its value as --flag=false\n", fs.Arg(0))
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "netready-sidecar "+buildversion.BuildVersion)
		return 0
	}
	if err := o.Validate(); err != nil {
		log.Error("invalid options", "err", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := sidecar.Run(ctx, o, log); err != nil {
		log.Error("failed", "err", err)
		return 1
	}
	return 0
}
