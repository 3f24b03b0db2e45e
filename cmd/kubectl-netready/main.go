// Command kubectl-netready is a kubectl plugin that tells an operator why
// a pod is, or is not, network-ready, and each node's netready state, from
// the Kubernetes API alone:
//
//	kubectl netready explain [-n NAMESPACE] POD [-o json]
//	kubectl netready status [-o json]
//
// explain exits 0 when the pod is network-ready, 1 when it is not, and 2
// on error.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/containernetworking/plugins/pkg/utils/buildversion"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/explain"
)

const usage = `Usage:
  kubectl netready explain [-n NAMESPACE] POD [-o json]   why POD is or is not network-ready (exit 0: ready, 1: not, 2: error)
  kubectl netready status [-o json]                        one line per node: netready's pod, the taint, waiting pods; then one per pool: free of capacity, exhausted or can't tell
  kubectl netready --version
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("kubectl-netready", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	kube := genericclioptions.NewConfigFlags(true)
	kube.AddFlags(fs)
	output := fs.StringP("output", "o", "", `"json" for the same facts as JSON`)
	netreadyNS := fs.String("netready-namespace", explain.DefaultNamespace, "the namespace netready is deployed in")
	timeout := fs.Duration("timeout", 30*time.Second, "give up on the API server after this long")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if asksHelp(args) {
		// Asked for: the usage is the answer, on stdout, and no error.
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "kubectl-netready "+buildversion.BuildVersion)
		return 0
	}
	if *output != "" && *output != "json" {
		fmt.Fprintf(stderr, "kubectl netready: -o %q: only json is supported\n", *output)
		return 2
	}
	rest := fs.Args()
	if len(rest) == 0 || (rest[0] == "explain" && len(rest) != 2) || (rest[0] == "status" && len(rest) != 1) || (rest[0] != "explain" && rest[0] != "status") {
		fs.Usage()
		return 2
	}
	cfg, err := kube.ToRESTConfig()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl netready: %v\n", err)
		return 2
	}
	cfg.UserAgent = "kubectl-netready/" + buildversion.BuildVersion
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl netready: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	o := explain.Options{Namespace: *netreadyNS}
	if rest[0] == "status" {
		nodes, err := explain.Nodes(ctx, client, o)
		if err != nil {
			fmt.Fprintf(stderr, "kubectl netready status: %v\n", err)
			return 2
		}
		if *output == "json" {
			return writeJSON(stdout, stderr, nodes)
		}
		explain.WriteNodesText(stdout, nodes)
		return 0
	}
	namespace, _, err := kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl netready: %v\n", err)
		return 2
	}
	r, err := explain.Pod(ctx, client, namespace, rest[1], o)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl netready explain: %v\n", err)
		return 2
	}
	if *output == "json" {
		if code := writeJSON(stdout, stderr, r); code != 0 {
			return code
		}
	} else {
		r.WriteText(stdout)
	}
	if !r.NetworkReady {
		return 1
	}
	return 0
}

func writeJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "kubectl netready: %v\n", err)
		return 2
	}
	return 0
}

// asksHelp reports -h or --help among the flags (before "--").
func asksHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "--help", "-help":
			return true
		}
	}
	return false
}
