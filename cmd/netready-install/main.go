// Command netready-install puts netready last in the CNI configuration that
// the node's runtime uses, copies the plugin binary, and with --watch keeps
// the entry there when the primary network plugin rewrites its file.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/utils/buildversion"
	"golang.org/x/sys/unix"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/conflist"
)

// Modes of installation.
const (
	ModeConflist  = "conflist"
	ModePluginDir = "plugin-dir"
)

type options struct {
	ConfDir      string
	BinDir       string
	Network      string
	Config       string
	PluginBinary string
	Mode         string
	Watch        bool
	Uninstall    bool
	Resync       time.Duration
	WaitTimeout  time.Duration

	// snippet is Config read (a file, or inline JSON).
	snippet []byte
}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var o options
	fs := flag.NewFlagSet("netready-install", flag.ContinueOnError)
	fs.StringVar(&o.ConfDir, "conf-dir", "/etc/cni/net.d", "the runtime's CNI configuration folder")
	fs.StringVar(&o.BinDir, "bin-dir", "/opt/cni/bin", "the runtime's CNI plugin folder")
	fs.StringVar(&o.Network, "network", "", "install into the config of this network (default: the file the runtime picks)")
	fs.StringVar(&o.Config, "config", "", `netready's entry: a JSON file, a folder of *.json fragments merged in name order (RFC 7386), or inline JSON (default {"type": "netready"})`)
	fs.StringVar(&o.PluginBinary, "plugin-binary", "", "the plugin to copy (default: netready beside this program)")
	fs.StringVar(&o.Mode, "mode", ModeConflist, "conflist: append to the chain; plugin-dir: write <conf-dir>/<network>/netready.conf (libcni 1.3+)")
	fs.BoolVar(&o.Watch, "watch", false, "keep the entry in place until stopped (with --uninstall: keep it out)")
	fs.BoolVar(&o.Uninstall, "uninstall", false, "remove netready's entry (the binary stays)")
	fs.DurationVar(&o.Resync, "resync", time.Minute, "with --watch, re-check this often even without events")
	fs.DurationVar(&o.WaitTimeout, "wait-timeout", 0, "give up waiting for a CNI config after this long (0: wait until stopped)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	validate := fs.String("validate", "", `check the entry (or the conflist's netready entry) in this file ("-": stdin) with the plugin's rules, print every problem and exit 1 if any; nothing is written`)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("netready-install " + buildversion.BuildVersion)
		return 0
	}
	if *validate != "" {
		return validateFile(*validate, os.Stdin, os.Stdout)
	}
	o.Defaults()
	if err := o.Validate(); err != nil {
		log.Error("invalid options; nothing was changed", "err", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if !o.Uninstall {
		if err := validateEntry(o.snippet); err != nil {
			fmt.Fprintf(os.Stderr, "netready-install: nothing was written: %s\n", err)
			return 1
		}
	}
	in := newInstaller(o, log)
	var err error
	switch {
	case o.Uninstall && !o.Watch:
		err = in.uninstall()
	case o.Watch:
		// A stop is a restart or an upgrade, not an uninstall: the entry
		// stays.
		err = in.watch(ctx)
	default:
		err = in.installOnce(ctx)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("failed", "err", err)
		return 1
	}
	return 0
}

// Defaults fills in what the flags left out.
func (o *options) Defaults() {
	if o.PluginBinary == "" && !o.Uninstall {
		if self, err := os.Executable(); err == nil {
			o.PluginBinary = filepath.Join(filepath.Dir(self), "netready")
		}
	}
	if o.Resync <= 0 {
		o.Resync = time.Minute
	}
}

// Validate checks everything that can be checked before a write, so that
// bad input changes nothing. It reads --config.
func (o *options) Validate() error {
	var errs []error
	for flagName, dir := range map[string]string{"--conf-dir": o.ConfDir, "--bin-dir": o.BinDir} {
		if flagName == "--bin-dir" && o.Uninstall {
			continue
		}
		if err := writableDir(dir); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", flagName, err))
		}
	}
	if o.Mode != ModeConflist && o.Mode != ModePluginDir {
		errs = append(errs, fmt.Errorf("--mode %q must be %q or %q", o.Mode, ModeConflist, ModePluginDir))
	}
	if !o.Uninstall {
		if info, err := os.Stat(o.PluginBinary); err != nil {
			errs = append(errs, fmt.Errorf("--plugin-binary: %w", err))
		} else if !info.Mode().IsRegular() {
			errs = append(errs, fmt.Errorf("--plugin-binary %s is not a file", o.PluginBinary))
		}
	}
	switch c := strings.TrimSpace(o.Config); {
	case c == "":
	case strings.HasPrefix(c, "{"), strings.HasPrefix(c, "["):
		o.snippet = []byte(c)
	default:
		data, err := readConfig(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("--config: %w", err))
		}
		o.snippet = data
	}
	return errors.Join(errs...)
}

// readConfig reads the entry from a file, or from a folder of fragments:
// its *.json files in name order, each a JSON merge patch (RFC 7386) on
// the ones before, so that kustomize components can each add keys to one
// ConfigMap (a list such as "checks" is replaced, not appended to).
func readConfig(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return os.ReadFile(path)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	merged := []byte("{}")
	n := 0
	for _, e := range entries {
		// A ConfigMap volume keeps its real files in ..data folders.
		if strings.HasPrefix(e.Name(), ".") || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		frag, err := os.ReadFile(filepath.Join(path, e.Name()))
		if err != nil {
			return nil, err
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(frag, &obj); err != nil {
			return nil, fmt.Errorf("%s: must be a JSON object: %w", e.Name(), err)
		}
		if merged, err = jsonpatch.MergePatch(merged, frag); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s holds no *.json fragment", path)
	}
	return merged, nil
}

// validateEntry checks the entry with the plugin's own rules before any
// config is known, so that a bad one fails at once; ensure checks it again
// merged with the chosen file's name and cniVersion. The error is the
// plugin's own message.
func validateEntry(snippet []byte) error {
	entry, err := conflist.Entry(snippet)
	if err != nil {
		return err
	}
	probe := &conflist.File{Raw: []byte(`{"cniVersion":"1.1.0","name":"netready-install-check"}`)}
	merged, err := probe.Merged(entry)
	if err != nil {
		return err
	}
	if _, err := config.Parse(merged); err != nil {
		return err
	}
	return nil
}

func newInstaller(o options, log *slog.Logger) *installer {
	return &installer{opts: o, log: log, written: map[string][]byte{}, warned: map[string]bool{}}
}

// writableDir: an existing folder this process can write. Root ignores
// permission bits, so this catches a missing folder and a read-only mount.
func writableDir(dir string) error {
	info, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s does not exist", dir)
	}
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	return nil
}
