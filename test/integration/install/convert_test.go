//go:build integration

package install

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestConversionNeverWritesOverAVendorsConflist: the real netready-install,
// given a single-plugin .conf beside a vendor's conflist of the same base
// name (flannel's stock 10-flannel.conflist), converts nothing: once and
// with --watch it exits 1 naming both files, and both stay byte for byte,
// with no binary copied. Once the operator removes the file the runtime
// should not use, as the message says, the .conf is converted.
func TestConversionNeverWritesOverAVendorsConflist(t *testing.T) {
	stock, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "stock", "flannel", "10-flannel.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, conf, why string
	}{
		{"another network", `{"cniVersion":"1.0.0","name":"podnet","type":"bridge","bridge":"nrconv0","ipam":{"type":"host-local","subnet":"10.200.70.0/24"}}`,
			`is the config of network "cbr0", not "podnet"`},
		{"an older flannel's .conf of the same network", `{"name":"cbr0","cniVersion":"0.3.1","type":"flannel","delegate":{"isDefaultGateway":true}}`,
			"chains 2 plugins besides netready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, bin := t.TempDir(), t.TempDir()
			confPath, listPath := filepath.Join(conf, "10-flannel.conf"), filepath.Join(conf, "10-flannel.conflist")
			writeAtomic(t, listPath, stock)
			writeAtomic(t, confPath, []byte(tc.conf))
			args := []string{"--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready")}
			unchanged := func(when string) {
				t.Helper()
				if got, _ := os.ReadFile(listPath); string(got) != string(stock) {
					t.Errorf("%s: the vendor's %s changed:\n%s", when, listPath, got)
				}
				if got, _ := os.ReadFile(confPath); string(got) != tc.conf {
					t.Errorf("%s: %s changed:\n%s", when, confPath, got)
				}
				if _, err := os.Stat(filepath.Join(bin, "netready")); err == nil {
					t.Errorf("%s: a refused install copied the binary", when)
				}
			}
			refused := func(when string, code int, out string) {
				t.Helper()
				if code != 1 || !strings.Contains(out, confPath) || !strings.Contains(out, listPath) || !strings.Contains(out, tc.why) {
					t.Errorf("%s: exit %d; want 1 naming %s and %s, with %q:\n%s", when, code, confPath, listPath, tc.why, out)
				}
				unchanged(when)
			}

			code, out := cnitest.Installer(t, args...)
			refused("once", code, out)

			// The DaemonSet's mode: the refusal ends the watch, too.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(harness.BinDir, "netready-install"), append(args, "--watch", "--resync", "1h")...)
			watchOut, err := cmd.CombinedOutput()
			if ctx.Err() != nil || cmd.ProcessState == nil {
				t.Fatalf("--watch did not end on its own within 30 s: %v\n%s", err, watchOut)
			}
			code = cmd.ProcessState.ExitCode()
			refused("--watch", code, string(watchOut))

			// What the message says to do: remove the file the runtime
			// should not use; here the vendor's, so the .conf is converted.
			if err := os.Remove(listPath); err != nil {
				t.Fatal(err)
			}
			if code, out := cnitest.Installer(t, args...); code != 0 {
				t.Fatalf("after removing %s: exit %d\n%s", listPath, code, out)
			}
			data, err := os.ReadFile(listPath)
			if err != nil {
				t.Fatal(err)
			}
			if typ, err := lastPluginType(data); err != nil || typ != "netready" {
				t.Errorf("%s after the conversion: last plugin %q (%v):\n%s", listPath, typ, err, data)
			}
			if _, err := os.Stat(confPath); err == nil {
				t.Errorf("%s stayed after its conversion", confPath)
			}
		})
	}
}

// TestReconvertsItsOwnConflistWhenTheConfReturns: ovnkube-node writes its
// single-plugin .conf again on each restart, beside the conflist
// netready-install made of it. The watching installer takes that conflist
// as its own and converts the new .conf over it (the new MTU kept, netready
// last, the .conf gone), also after --uninstall emptied the conflist of its
// entry.
func TestReconvertsItsOwnConflistWhenTheConfReturns(t *testing.T) {
	stock, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "stock", "ovn-kubernetes", "10-ovn-kubernetes.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf, bin := t.TempDir(), t.TempDir()
	confPath, listPath := filepath.Join(conf, "10-ovn-kubernetes.conf"), filepath.Join(conf, "10-ovn-kubernetes.conflist")
	writeAtomic(t, confPath, stock)
	args := []string{"--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready")}
	waitConverted := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			data, err := os.ReadFile(listPath)
			typ, _ := lastPluginType(data)
			_, confErr := os.Stat(confPath)
			if err == nil && typ == "netready" && strings.Contains(string(data), want) && confErr != nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not converted within 10 s (want %s, netready last, no .conf):\n%s", what, want, data)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	cmd, _ := startInstaller(t, append(args, "--watch", "--resync", "1h")...)
	waitConverted("first conversion", `"logLevel": "4"`)
	// ovnkube-node restarts with another log level: its .conf is back.
	writeAtomic(t, confPath, []byte(strings.Replace(string(stock), `"logLevel":"4"`, `"logLevel":"5"`, 1)))
	waitConverted("the .conf written again", `"logLevel": "5"`)
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()

	if code, out := cnitest.Installer(t, "--conf-dir", conf, "--uninstall"); code != 0 {
		t.Fatalf("--uninstall: exit %d\n%s", code, out)
	}
	writeAtomic(t, confPath, []byte(strings.Replace(string(stock), `"logLevel":"4"`, `"logLevel":"5"`, 1)))
	if code, out := cnitest.Installer(t, args...); code != 0 {
		t.Fatalf("install after --uninstall with the same .conf back: exit %d\n%s", code, out)
	}
	waitConverted("after --uninstall", `"logLevel": "5"`)
}
