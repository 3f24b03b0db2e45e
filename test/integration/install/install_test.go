//go:build integration

package install

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// installer runs bin/netready-install with the given flags.
func startInstaller(t *testing.T, args ...string) (*exec.Cmd, *harness.SyncBuffer) {
	t.Helper()
	cmd := exec.Command(filepath.Join(harness.BinDir, "netready-install"), args...)
	var logs harness.SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("installer log:\n%s", logs.String())
		}
	})
	return cmd, &logs
}

// lastPluginType reads a conflist and returns its last plugin's type.
func lastPluginType(data []byte) (string, error) {
	var l struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return "", err
	}
	if len(l.Plugins) == 0 {
		return "", nil
	}
	return l.Plugins[len(l.Plugins)-1].Type, nil
}

// writeAtomic is how a well-behaved primary writes its file.
func writeAtomic(t *testing.T, path string, data []byte) {
	tmp := filepath.Join(filepath.Dir(path), ".primary.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Error(err)
	}
}

// TestInstallerPutsNetreadyBackAfterARewrite: a stand-in primary rewrites its conflist without
// netready again; each time (up to the fight limit) netready is back last
// in the chain within a second, the third brings a warning, and a reader
// never sees a half-written file.
func TestInstallerPutsNetreadyBackAfterARewrite(t *testing.T) {
	conf, bin := t.TempDir(), t.TempDir()
	path := filepath.Join(conf, "10-primary.conflist")
	primary := []byte(`{"cniVersion":"1.1.0","name":"podnet","plugins":[{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.200.60.0/24"}]]}}]}`)
	writeAtomic(t, path, primary)
	_, logs := startInstaller(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"), "--watch", "--resync", "1h")

	waitFor := func(what string, cond func() bool) time.Duration {
		start := time.Now()
		for time.Since(start) < 5*time.Second {
			if cond() {
				return time.Since(start)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("%s: not within 5 s", what)
		return 0
	}
	hasNetready := func() bool {
		data, err := os.ReadFile(path)
		typ, _ := lastPluginType(data)
		return err == nil && typ == "netready"
	}
	waitFor("first install", hasNetready)

	ctx, cancel := context.WithCancel(context.Background())
	var reads, bad atomic.Int64
	var readerDone sync.WaitGroup
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		for ctx.Err() == nil {
			data, err := os.ReadFile(path)
			if err != nil {
				continue // between a .conf removal and the rename there is none; here it is always there
			}
			reads.Add(1)
			if _, err := lastPluginType(data); err != nil {
				bad.Add(1)
				t.Errorf("reader saw a file that does not parse: %v: %q", err, data)
			}
		}
	}()
	var worst time.Duration
	// Four rewrites: a fifth within five minutes is a fight, and the
	// installer backs off (TestInstallerBacksOffFromAnExclusiveAgent).
	for i := 0; i < 4; i++ {
		writeAtomic(t, path, primary)
		took := waitFor("re-insert after the primary rewrote its file", hasNetready)
		worst = max(worst, took)
		if took > time.Second {
			t.Errorf("rewrite %d: netready back after %s, want within 1 s", i, took)
		}
	}
	cancel()
	readerDone.Wait()
	t.Logf("4 rewrites: netready back within %s at worst; %d reads, %d unparsable", worst, reads.Load(), bad.Load())
	if !strings.Contains(logs.String(), "another agent keeps removing netready") {
		t.Errorf("no warning about the agent that keeps reverting the file:\n%s", logs.String())
	}
	if _, err := os.Stat(filepath.Join(bin, "netready")); err != nil {
		t.Errorf("binary not installed: %v", err)
	}
}

// TestInstalledChainServesRealADDs: the installer edits a copy of a conflist whose
// chain lacks netready, then real cnitool ADDs go through the edited chain
// and netready writes its marker; for both install modes. Stopping the
// watcher leaves the entry; --uninstall removes it.
func TestInstalledChainServesRealADDs(t *testing.T) {
	for _, mode := range []string{"conflist", "plugin-dir"} {
		t.Run(mode, func(t *testing.T) {
			n := cnitest.NewNet(t, "bridge.conflist", nil)
			n.ShipWithoutNetready()
			bin := cnitest.PluginDir(t, "bridge", "host-local", "loopback")
			snippet := `{"type":"netready","stateDir":"` + n.StateDir + `","checks":[{"kind":"address"},{"kind":"route"}]}`
			cnitest.RunInstaller(t, "--conf-dir", n.ConfDir, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"),
				"--config", snippet, "--mode", mode)

			netns := cnitest.NewNS(t)
			cmd := exec.Command(filepath.Join(harness.CNIBinDir, "cnitool"), "add", n.Name, netns.Path())
			cmd.Env = append(os.Environ(), "NETCONFPATH="+n.ConfDir, "CNI_PATH="+bin)
			t.Cleanup(func() {
				del := exec.Command(filepath.Join(harness.CNIBinDir, "cnitool"), "del", n.Name, netns.Path())
				del.Env = cmd.Env
				del.Run()
			})
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("cnitool add through the installed chain: %v\n%s", err, out)
			}
			m := n.ReadMarker(cnitest.ContainerID(netns.Path()), "eth0")
			if m.State != "ready" {
				t.Errorf("marker state %s", m.State)
			}

			cnitest.RunInstaller(t, "--conf-dir", n.ConfDir, "--uninstall", "--bin-dir", bin)
			data, _ := os.ReadFile(filepath.Join(n.ConfDir, n.Name+".conflist"))
			if typ, err := lastPluginType(data); err != nil || typ != "bridge" {
				t.Errorf("after --uninstall the chain ends with %q (%v), want bridge", typ, err)
			}
			if _, err := os.Stat(filepath.Join(n.ConfDir, n.Name, "netready.conf")); err == nil {
				t.Errorf("after --uninstall the plugin-dir file is still there")
			}
			if _, err := os.Stat(filepath.Join(bin, "netready")); err != nil {
				t.Errorf("--uninstall removed more than the entry: %v", err)
			}
		})
	}
	t.Run("read-only config folder changes nothing", func(t *testing.T) {
		conf, bin := t.TempDir(), t.TempDir()
		path := filepath.Join(conf, "10-primary.conflist")
		primary := []byte(`{"cniVersion":"1.1.0","name":"podnet","plugins":[{"type":"ptp"}]}`)
		writeAtomic(t, path, primary)
		harness.MustRun(t, "mount", "--bind", conf, conf)
		t.Cleanup(func() { harness.MustRun(t, "umount", conf) })
		harness.MustRun(t, "mount", "-o", "remount,bind,ro", conf)
		cmd := exec.Command(filepath.Join(harness.BinDir, "netready-install"), "--conf-dir", conf, "--bin-dir", bin,
			"--plugin-binary", filepath.Join(harness.BinDir, "netready"))
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "is not writable") || !strings.Contains(string(out), "nothing was changed") {
			t.Errorf("install into a read-only folder = %v\n%s\nwant a failure naming it", err, out)
		}
		if data, _ := os.ReadFile(path); !bytes.Equal(data, primary) {
			t.Errorf("the conflist changed: %s", data)
		}
		if entries, _ := os.ReadDir(bin); len(entries) != 0 {
			t.Errorf("the bin folder changed: %v", entries)
		}
	})
	t.Run("stop is not uninstall", func(t *testing.T) {
		conf, bin := t.TempDir(), t.TempDir()
		path := filepath.Join(conf, "10-primary.conflist")
		writeAtomic(t, path, []byte(`{"cniVersion":"1.1.0","name":"podnet","plugins":[{"type":"ptp"}]}`))
		cmd, _ := startInstaller(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"), "--watch")
		for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(10 * time.Millisecond) {
			if data, _ := os.ReadFile(path); bytes.Contains(data, []byte("netready")) {
				break
			}
		}
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("installer exit after SIGINT: %v", err)
		}
		data, _ := os.ReadFile(path)
		if typ, _ := lastPluginType(data); typ != "netready" {
			t.Errorf("after a stop the chain ends with %q, want netready still there", typ)
		}
	})
}

// TestInstallerRaisesCNIVersionOnlyWhenEveryPluginCan: with --cni-version auto, a stock 0.3.1
// conflist (bridge, host-local, portmap) is raised to 1.1.0 after the real
// reference plugins and netready each answered VERSION with 1.1.0, and the
// raised chain then answers STATUS through libcni. With a plugin that
// supports only 0.3.1 in the chain, the version stays, and the installer
// names that plugin. Without the flag the version is never changed.
func TestInstallerRaisesCNIVersionOnlyWhenEveryPluginCan(t *testing.T) {
	stock := func(extra string) string {
		return `{"cniVersion":"0.3.1","name":"autonet","plugins":[{"type":"bridge","bridge":"nrauto0","ipam":{"type":"host-local","subnet":"10.200.251.0/24"}},{"type":"portmap","capabilities":{"portMappings":true}}` + extra + `]}`
	}
	version := func(t *testing.T, path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			CNIVersion string `json:"cniVersion"`
		}
		json.Unmarshal(data, &v)
		return v.CNIVersion
	}
	t.Run("every plugin supports 1.1.0", func(t *testing.T) {
		conf, bin := t.TempDir(), cnitest.PluginDir(t, "bridge", "host-local", "portmap")
		path := filepath.Join(conf, "10-autonet.conflist")
		os.WriteFile(path, []byte(stock("")), 0o644)
		out := cnitest.RunInstaller(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"), "--cni-version", "auto")
		if got := version(t, path); got != "1.1.0" {
			t.Fatalf("cniVersion after --cni-version auto = %q, want 1.1.0\n%s", got, out)
		}
		if last, _ := lastPluginType(mustRead(t, path)); last != "netready" {
			t.Errorf("last plugin = %q, want netready", last)
		}
		// The raised chain takes STATUS: every plugin runs at 1.1.0.
		list, err := libcni.ConfListFromFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cni := libcni.NewCNIConfigWithCacheDir([]string{bin}, t.TempDir(), nil)
		if err := cni.GetStatusNetworkList(context.Background(), list); err != nil {
			t.Errorf("STATUS of the raised chain: %v", err)
		}
	})
	t.Run("a plugin that supports only 0.3.1", func(t *testing.T) {
		conf, bin := t.TempDir(), cnitest.PluginDir(t, "bridge", "host-local", "portmap")
		old := `#!/bin/sh
[ "$CNI_COMMAND" = VERSION ] && echo '{"cniVersion":"0.3.1","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1"]}' && exit 0
echo '{"cniVersion":"0.3.1","code":4,"msg":"only VERSION here"}'; exit 1
`
		if err := os.WriteFile(filepath.Join(bin, "oldplugin"), []byte(old), 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(conf, "10-autonet.conflist")
		os.WriteFile(path, []byte(stock(`,{"type":"oldplugin"}`)), 0o644)
		out := cnitest.RunInstaller(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"), "--cni-version", "auto")
		if got := version(t, path); got != "0.3.1" {
			t.Errorf("cniVersion with a 0.3.1-only plugin = %q, want it left at 0.3.1", got)
		}
		if !strings.Contains(out, `plugin \"oldplugin\" supports 0.1.0, 0.2.0, 0.3.0, 0.3.1, not 1.1.0`) {
			t.Errorf("the installer did not name the plugin that holds the version back:\n%s", out)
		}
	})
	t.Run("without the flag", func(t *testing.T) {
		conf, bin := t.TempDir(), cnitest.PluginDir(t, "bridge", "host-local", "portmap")
		path := filepath.Join(conf, "10-autonet.conflist")
		os.WriteFile(path, []byte(stock("")), 0o644)
		out := cnitest.RunInstaller(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"))
		if got := version(t, path); got != "0.3.1" || !strings.Contains(out, "--cni-version auto") {
			t.Errorf("cniVersion without the flag = %q (want 0.3.1), warning names the flag: %v\n%s", got, strings.Contains(out, "--cni-version auto"), out)
		}
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
