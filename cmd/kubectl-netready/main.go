// Command kubectl-netready is a kubectl plugin that tells an operator why
// a pod is, or is not, network-ready, and each node's netready state, from
// the Kubernetes API alone:
//
//	kubectl netready explain [-n NAMESPACE] POD [-o json|yaml]
//	kubectl netready status [-o json|yaml]
//	kubectl netready off | on
//
// explain exits 0 when the pod is network-ready, 1 when it is not; status
// exits 0 when no node has a problem, 1 when one has. Both exit 2 on a
// usage error or when the API cannot answer.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/utils/buildversion"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/pkg/explain"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// failure is an error past the command line (the API server's, say): it
// is named without the hint to read --help.
type failure struct{ error }

// errNotMet ends a command that said all it had to: exit 1.
var errNotMet = errors.New("not met")

// flags are the flags every command takes.
type flags struct {
	kube       *genericclioptions.ConfigFlags
	output     string
	netreadyNS string
	timeout    time.Duration
}

func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(helpFlag(args))
	cmd, err := root.ExecuteC()
	var f failure
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errNotMet):
		return 1
	case errors.As(err, &f):
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), f.error)
	default:
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", cmd.CommandPath(), err, cmd.CommandPath())
	}
	return 2
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	fl := &flags{kube: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use:   "kubectl-netready",
		Short: "why a pod is, or is not, network-ready, and each node's netready state",
		Long: `kubectl netready tells why a pod is, or is not, network-ready, and each
node's netready state, from the Kubernetes API alone.`,
		Example: `  kubectl netready explain -n demo web     # exit 0: network-ready, 1: not, 2: error
  kubectl netready explain pod/web -o yaml
  kubectl netready status                  # exit 0: no node has a problem, 1: one has, 2: error
  kubectl netready off                     # in an incident: no gates, no waits; kubectl netready on undoes it`,
		Annotations:       map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl netready"},
		Version:           buildversion.BuildVersion,
		Args:              noCommand,
		RunE:              func(*cobra.Command, []string) error { return errors.New("name a command: explain, status, off or on") },
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("kubectl-netready {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	pf := root.PersistentFlags()
	fl.kube.AddFlags(pf)
	pf.StringVarP(&fl.output, "output", "o", "", `"json" or "yaml" for the same facts as data (default: text)`)
	pf.StringVar(&fl.netreadyNS, "netready-namespace", explain.DefaultNamespace, "the namespace netready is deployed in")
	pf.DurationVar(&fl.timeout, "timeout", 30*time.Second, "give up on the API server after this long")
	root.AddCommand(explainCmd(fl), statusCmd(fl), offCmd(fl), onCmd(fl))
	return root
}

// helpFlag reads Go's -help as --help, as the other netready tools take
// it, rather than as the shorthands -h -e -l -p.
func helpFlag(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if a == "-help" {
			out[i] = "--help"
		}
	}
	return out
}

// noCommand names a word that is not a command.
func noCommand(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unknown command %q: the commands are explain, status, off and on", args[0])
	}
	return nil
}

func explainCmd(fl *flags) *cobra.Command {
	return &cobra.Command{
		Use:   "explain [-n NAMESPACE] (POD | pod/POD) [-o json|yaml]",
		Short: "why POD is or is not network-ready (exit 0: ready, 1: not, 2: error)",
		Long: `explain says whether POD is network-ready, and why: its gate and where it
came from, its netready condition, each network and interface (programmed,
or the unmet checks), netready's and kubelet's Events for it, its node's
runtime network, taint and pools, and the netready pod on that node, or
that none runs there to publish the gate. With rights in one namespace
alone, it explains the pod with what it may read and names each read it
was refused.

Exit status: 0 when the pod's condition is True, 1 otherwise (also for a pod
netready does not gate), 2 on a usage error or when the API cannot answer.`,
		Example: `  kubectl netready explain -n demo web
  kubectl netready explain pod/web -o json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("name one pod, NAME or pod/NAME; got %d arguments", len(args))
			}
			_, err := podName(args[0])
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := fl.check(); err != nil {
				return err
			}
			name, _ := podName(args[0])
			client, err := fl.client()
			if err != nil {
				return err
			}
			namespace, _, err := fl.kube.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return failure{err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), fl.timeout)
			defer cancel()
			r, err := explain.Pod(ctx, client, namespace, name, explain.Options{Namespace: fl.netreadyNS})
			if err != nil {
				return failure{err}
			}
			if err := fl.write(cmd.OutOrStdout(), r, func(w io.Writer) { r.WriteText(w) }); err != nil {
				return err
			}
			if !r.NetworkReady {
				return errNotMet
			}
			return nil
		},
	}
}

func statusCmd(fl *flags) *cobra.Command {
	var policy string
	cmd := &cobra.Command{
		Use:   "status [-o json|yaml]",
		Short: "each node's netready state and pools (exit 0: no problem, 1: a node has one, 2: error)",
		Long: `status prints a line per node: the netready pod, its version and readiness,
the taint, how many gated pods wait and the oldest wait; then a line per
pool the node's NetworkPoolExhausted condition names; then the sidecar's
warnings that ask the operator to act. While netready is switched off
(kubectl netready off), one line above them says so: since when, by
which tool, and how to undo it (with -o, on stderr).

Exit status: 0 when no node has a problem, 1 when one has (each is named on
stderr: the runtime's network not ready, netready's taint, a pool exhausted
or can't tell, netready's pod not ready, or missing where gated pods wait,
a warning), 2 on a usage error or when the API cannot answer.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected arguments %q: status takes none", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := fl.check(); err != nil {
				return err
			}
			client, err := fl.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), fl.timeout)
			defer cancel()
			o := explain.Options{Namespace: fl.netreadyNS, Policy: policy}
			// The off switch is read first, and what cannot be read of it
			// is said, never a reason to report no node.
			var line string
			if off, err := explain.OffState(ctx, client, o); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: whether netready is switched off is not known: %v\n", cmd.CommandPath(), err)
			} else {
				line = off.Line()
			}
			nodes, err := explain.Nodes(ctx, client, o)
			if err != nil {
				return failure{err}
			}
			// The off line heads the text; -o keeps its list of nodes,
			// so the line goes to stderr there.
			if line != "" && fl.output != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", cmd.CommandPath(), line)
			}
			if err := fl.write(cmd.OutOrStdout(), nodes, func(w io.Writer) {
				if line != "" {
					fmt.Fprintln(w, line)
				}
				explain.WriteNodesText(w, nodes)
			}); err != nil {
				return err
			}
			found := false
			for _, n := range nodes {
				for _, p := range problems(n) {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: node %s: %s\n", cmd.CommandPath(), n.Node, p)
					found = true
				}
			}
			if found {
				return errNotMet
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&policy, "policy", "", policyHelp)
	return cmd
}

// podName is the pod's name from NAME or pod/NAME.
func podName(arg string) (string, error) {
	kind, name, ok := strings.Cut(arg, "/")
	switch {
	case !ok:
		name = arg
	case kind != "pod" && kind != "pods" && kind != "po":
		return "", fmt.Errorf("%q is not a pod: name one as NAME or pod/NAME", arg)
	}
	if name == "" {
		return "", fmt.Errorf("%q names no pod: name one as NAME or pod/NAME", arg)
	}
	return name, nil
}

// check validates what pflag cannot.
func (fl *flags) check() error {
	switch fl.output {
	case "", "json", "yaml":
	default:
		return fmt.Errorf(`-o %q: use "json" or "yaml", or leave -o out for text`, fl.output)
	}
	if fl.timeout <= 0 {
		return fmt.Errorf("--timeout %s: must be more than 0", fl.timeout)
	}
	return nil
}

func (fl *flags) client() (kubernetes.Interface, error) {
	cfg, err := fl.kube.ToRESTConfig()
	if err != nil {
		return nil, failure{err}
	}
	cfg.UserAgent = "kubectl-netready/" + buildversion.BuildVersion
	// client-go's default of 5 requests a second would spend a 1,000-node
	// status in its rate limiter; protobuf decodes pages of pods faster
	// than JSON.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, failure{err}
	}
	return client, nil
}

// write writes v as -o asks: text, JSON or YAML (the JSON's fields).
func (fl *flags) write(w io.Writer, v any, text func(io.Writer)) error {
	var out []byte
	var err error
	switch fl.output {
	case "":
		text(w)
		return nil
	case "json":
		out, err = json.MarshalIndent(v, "", "  ")
		out = append(out, '\n')
	case "yaml":
		out, err = yaml.Marshal(v)
	}
	if err != nil {
		return failure{err}
	}
	if _, err := w.Write(out); err != nil {
		return failure{fmt.Errorf("write the report: %w", err)}
	}
	return nil
}
