package sidecar

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/conditions"
)

func validOptions() Options {
	return Options{
		Config: conditions.Config{StateDir: "/run/netready", NodeName: "node-a", ConditionType: "netready.io/network-ready",
			PendingTimeout: time.Minute, Resync: time.Minute, Workers: 1, Unobserved: conditions.UnobservedReady},
		CNIConfDir: "/etc/cni/net.d", PoolResync: time.Minute, PoolForgetAfter: time.Second,
		KubeAPIQPS: DefaultKubeAPIQPS, KubeAPIBurst: DefaultKubeAPIBurst,
	}
}

// TestValidate: every bad option is named, all at once.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want []string
	}{
		{name: "valid", edit: func(*Options) {}},
		{name: "pool watch off", edit: func(o *Options) { o.CNIConfDir = "" }},
		{name: "measuring Cilium propagation", edit: func(o *Options) {
			o.MeasureCiliumPropagation, o.CiliumSocket = "netready.io/measure-propagation=true", DefaultCiliumSocket
		}},
		{name: "not measuring: any socket", edit: func(o *Options) { o.CiliumSocket = "" }},
		{name: "a bad selector and socket", edit: func(o *Options) { o.MeasureCiliumPropagation, o.CiliumSocket = "a=b=c", "cilium.sock" }, want: []string{
			`--measure-cilium-propagation "a=b=c" is not a label selector (such as netready.io/measure-cilium-propagation=true)`,
			`--cilium-socket "cilium.sock" must be the absolute path of cilium-agent's API socket`,
		}},
		{name: "a selector that picks every node", edit: func(o *Options) {
			o.MeasureCiliumPropagation, o.CiliumSocket = "!netready.io/skip", DefaultCiliumSocket
		}, want: []string{
			`--measure-cilium-propagation "!netready.io/skip" would select every node without the label: name a label the measuring nodes have, such as netready.io/measure-cilium-propagation=true`,
		}},
		{name: "a blank selector", edit: func(o *Options) { o.MeasureCiliumPropagation, o.CiliumSocket = " ", DefaultCiliumSocket }, want: []string{
			`--measure-cilium-propagation " " would select every node without the label: name a label the measuring nodes have, such as netready.io/measure-cilium-propagation=true`,
		}},
		{name: "a socket path the agent client cannot take", edit: func(o *Options) {
			o.MeasureCiliumPropagation, o.CiliumSocket = "netready.io/m=true", "/var/run/"+strings.Repeat("c", 120)+".sock"
		}, want: []string{`--cilium-socket "/var/run/` + strings.Repeat("c", 120) + `.sock": cilium agent socket: "unix:///var/run/` + strings.Repeat("c", 120) + `.sock": unix socket path longer than 107 bytes`}},
		{name: "no API requests at all", edit: func(o *Options) { o.KubeAPIQPS, o.KubeAPIBurst = 0, 0 }, want: []string{
			"--kube-api-qps 0 and --kube-api-burst 0 must be positive and finite",
		}},
		{name: "a rate that is not a number", edit: func(o *Options) { o.KubeAPIQPS = math.NaN() }, want: []string{
			"--kube-api-qps NaN and --kube-api-burst 100 must be positive and finite",
		}},
		{name: "an endless rate", edit: func(o *Options) { o.KubeAPIQPS = math.Inf(1) }, want: []string{
			"--kube-api-qps +Inf and --kube-api-burst 100 must be positive and finite",
		}},
		{name: "everything wrong", edit: func(o *Options) {
			o.StateDir, o.NodeName, o.ConditionType = "run/netready", "", "bad condition"
			o.Resync, o.Workers, o.UnobservedGrace, o.Unobserved, o.CNIConfDir = 0, 0, -time.Second, "maybe", "net.d"
			o.ScopeUnknownHold = -time.Second
		}, want: []string{
			`--state-dir "run/netready" must be an absolute path`,
			"--node-name (or $NODE_NAME) is required",
			`--condition-type "bad condition"`,
			"--pending-timeout, --resync, --pool-resync and --pool-forget-after must be positive",
			`--cni-conf-dir "net.d" must be an absolute path`,
			"--workers must be at least 1",
			"--unobserved-grace must not be negative",
			`--unobserved "maybe" must be "ready" or "notready"`,
			"--scope-unknown-hold must not be negative (0 writes at once when the scope cannot be told)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions()
			tc.edit(&o)
			var got []string
			if err := o.Validate(); err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			// The condition type's and the selector's messages go on
			// with the API's rules.
			for i := range got {
				for _, prefix := range []string{`--condition-type "bad condition"`, `--measure-cilium-propagation "a=b=c" is not a label selector (such as netready.io/measure-cilium-propagation=true)`} {
					if strings.HasPrefix(got[i], prefix) {
						got[i] = prefix
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Validate() problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunFailsWhenListenIsTaken: a --listen address that cannot be bound
// ends Run with the error (main exits 1), within seconds, even while the
// API server cannot be reached; before, the sidecar exited 0.
func TestRunFailsWhenListenIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	o := validOptions()
	o.StateDir, o.Kubeconfig, o.Listen, o.CNIConfDir = t.TempDir(), kubeconfig, taken.Addr().String(), ""
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err = Run(ctx, o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("Run = %v, want the listen error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run returned after %s, want within seconds", d)
	}
}
