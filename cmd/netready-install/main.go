// Command netready-install puts netready last in the CNI configuration that
// the node's runtime uses, copies the plugin binary, and with --watch keeps
// the entry there when the primary network plugin rewrites its file.
package main

import (
	"bytes"
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

	"github.com/netready/netready/pkg/install"
)

const usage = `Usage: netready-install [flags]

Puts netready last in the CNI configuration the node's runtime uses and
copies the plugin binary; with --watch keeps the entry there.

Flags:
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	var o install.Options
	fs := flag.NewFlagSet("netready-install", flag.ContinueOnError)
	// Parse's messages wait here: the usage asked for with -h goes to
	// stdout, the one after a wrong flag to stderr.
	var parseOut bytes.Buffer
	fs.SetOutput(&parseOut)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	fs.StringVar(&o.ConfDir, "conf-dir", "/etc/cni/net.d", "the runtime's CNI configuration folder")
	fs.StringVar(&o.BinDir, "bin-dir", "/opt/cni/bin", "the runtime's CNI plugin folder")
	fs.StringVar(&o.Network, "network", "", "install into the config of this network (default: the file the runtime picks)")
	fs.StringVar(&o.Config, "config", "", `netready's entry: a JSON file, a folder of *.json fragments merged in name order (RFC 7386), or inline JSON (default {"type": "netready"})`)
	fs.StringVar(&o.PluginBinary, "plugin-binary", "", "the plugin to copy (default: netready beside this program)")
	fs.StringVar(&o.Mode, "mode", install.ModeConflist, "conflist: append to the chain; plugin-dir: write <conf-dir>/<network>/netready.conf (libcni 1.3+)")
	fs.StringVar(&o.CNIVersion, "cni-version", "", `"auto": raise the conflist's cniVersion to 1.1.0, so that runtimes call STATUS and GC, when every plugin of the chain answers VERSION with 1.1.0 among its versions (default: leave it)`)
	fs.BoolVar(&o.Watch, "watch", false, "keep the entry in place until stopped (with --uninstall: keep it out)")
	fs.BoolVar(&o.Uninstall, "uninstall", false, "remove netready's entry (the binary stays)")
	fs.DurationVar(&o.Resync, "resync", time.Minute, "with --watch, re-check this often even without events")
	fs.DurationVar(&o.WaitTimeout, "wait-timeout", 0, "give up waiting for a CNI config after this long (0: wait until stopped)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	validate := fs.String("validate", "", `check the entry (or the conflist's netready entry) in this file ("-": stdin) with the plugin's rules, print every problem and exit 1 if any; nothing is written`)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = stdout.Write(parseOut.Bytes())
			return 0
		}
		_, _ = stderr.Write(parseOut.Bytes())
		return 2
	}
	if fs.NArg() > 0 {
		// Go's flags stop at the first word that is not one: "--uninstall
		// false" is --uninstall and a stray "false", never to be ignored.
		fmt.Fprintf(stderr, "netready-install: unexpected argument %q: it takes flags only, and a true/false flag its value as --flag=false\n", fs.Arg(0))
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "netready-install "+buildversion.BuildVersion)
		return 0
	}
	if *validate != "" {
		// Offline: no folder needs to exist or be writable.
		return install.ValidateFile(*validate, os.Stdin, stdout)
	}
	o.Defaults()
	if err := o.Validate(); err != nil {
		log.Error("invalid options; nothing was changed", "err", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := install.Run(ctx, o, log); err != nil {
		fmt.Fprintf(stderr, "netready-install: %s\n", err)
		return 1
	}
	return 0
}
