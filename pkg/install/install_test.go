package install

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden want/ folders")

// readTree returns every file under dir, by relative path.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, _ := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(data)
		return nil
	})
	return out
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	for rel, data := range readTree(t, from) {
		os.MkdirAll(filepath.Join(to, filepath.Dir(rel)), 0o755)
		if err := os.WriteFile(filepath.Join(to, rel), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func testInstaller(t *testing.T, o Options) *installer {
	t.Helper()
	if o.PluginBinary == "" {
		o.PluginBinary = filepath.Join(t.TempDir(), "netready")
		os.WriteFile(o.PluginBinary, []byte("#!/bin/true\n"), 0o755)
	}
	if o.Mode == "" {
		o.Mode = ModeConflist
	}
	o.Defaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if err := validateEntry(o.snippet); err != nil {
		t.Fatalf("validateEntry: %v", err)
	}
	return newInstaller(o, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// TestGolden runs the installer on testdata/<case>/in and compares the
// folder with testdata/<case>/want. go test -update rewrites want/.
func TestGolden(t *testing.T) {
	tests := []struct {
		name      string
		network   string
		config    string
		mode      string
		uninstall bool
		wantErr   string // ensure fails with this, changing nothing
	}{
		{name: "conf-becomes-conflist"},
		{name: "already-twice", config: `{"type":"netready","timeout":"5s"}`},
		{name: "unknown-fields"},
		{name: "invalid-sorts-first", wantErr: "an earlier CNI config file is invalid"},
		{name: "several-files"},
		{name: "network-flag", network: "second"},
		{name: "uninstall", uninstall: true},
		{name: "snippet-with-status", config: `{"type":"netready","status":{"minFree":2}}`},
		{name: "plugin-dir", mode: ModePluginDir},
		{name: "plugin-dir-conf-primary", mode: ModePluginDir, wantErr: "single-plugin .conf"},
		{name: "plugin-dir-inlined", mode: ModePluginDir, wantErr: `"loadOnlyInlinedPlugins": true`},
		{name: "old-version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf, bin := t.TempDir(), t.TempDir()
			copyTree(t, filepath.Join("testdata", tt.name, "in"), conf)
			in := testInstaller(t, Options{ConfDir: conf, BinDir: bin, Network: tt.network, Config: tt.config, Mode: tt.mode, Uninstall: tt.uninstall})
			run := in.ensure
			if tt.uninstall {
				run = in.uninstall
			}
			err := run()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("run = %v, want an error containing %q", err, tt.wantErr)
				}
				if diff := cmp.Diff(readTree(t, filepath.Join("testdata", tt.name, "in")), readTree(t, conf)); diff != "" {
					t.Errorf("a refused run changed the folder (-before +after):\n%s", diff)
				}
				if len(readTree(t, bin)) != 0 {
					t.Errorf("a refused run installed the binary")
				}
				return
			}
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			got := readTree(t, conf)
			wantDir := filepath.Join("testdata", tt.name, "want")
			if *update {
				os.RemoveAll(wantDir)
				copyTree(t, conf, wantDir)
			}
			if diff := cmp.Diff(readTree(t, wantDir), got); diff != "" {
				t.Errorf("config folder (-want +got):\n%s", diff)
			}
			// Idempotent: a second run writes nothing.
			before := readTree(t, conf)
			stat := func() map[string]time.Time {
				m := map[string]time.Time{}
				for rel := range before {
					if info, err := os.Stat(filepath.Join(conf, rel)); err == nil {
						m[rel] = info.ModTime()
					}
				}
				return m
			}
			mtimes := stat()
			time.Sleep(10 * time.Millisecond)
			if err := run(); err != nil {
				t.Fatalf("second run: %v", err)
			}
			if diff := cmp.Diff(mtimes, stat()); diff != "" {
				t.Errorf("second run rewrote files (-first +second mtimes):\n%s", diff)
			}
			if !tt.uninstall {
				if _, err := os.Stat(filepath.Join(bin, "netready")); err != nil {
					t.Errorf("binary not installed: %v", err)
				}
			}
		})
	}
}

// TestBadInputChangesNothing: each bad input is refused before any write.
func TestBadInputChangesNothing(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, conf string) Options
		want  string
	}{
		{"missing conf dir", func(t *testing.T, conf string) Options {
			return Options{ConfDir: filepath.Join(conf, "nope")}
		}, "does not exist"},
		{"snippet not an object", func(t *testing.T, conf string) Options {
			return Options{ConfDir: conf, Config: `["netready"]`}
		}, "--config must be a JSON object"},
		{"snippet of another type", func(t *testing.T, conf string) Options {
			return Options{ConfDir: conf, Config: `{"type":"bridge"}`}
		}, `"type" must be "netready"`},
		{"missing plugin binary", func(t *testing.T, conf string) Options {
			return Options{ConfDir: conf, PluginBinary: filepath.Join(conf, "nope")}
		}, "--plugin-binary"},
		{"bad mode", func(t *testing.T, conf string) Options {
			return Options{ConfDir: conf, Mode: "merge"}
		}, `--mode "merge"`},
		{"entry the plugin refuses", func(t *testing.T, conf string) Options {
			return Options{ConfDir: conf, Config: `{"type":"netready","timeout":"5m","checks":[{"kind":"iptables","tabel":"x"}]}`}
		}, `netready: invalid configuration: checks[0]: unknown key "tabel"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf, bin := t.TempDir(), t.TempDir()
			copyTree(t, filepath.Join("testdata", "unknown-fields", "in"), conf)
			before := readTree(t, conf)
			o := tt.setup(t, conf)
			o.BinDir = bin
			if o.Mode == "" {
				o.Mode = ModeConflist
			}
			if o.PluginBinary == "" {
				o.PluginBinary = filepath.Join(t.TempDir(), "netready")
				os.WriteFile(o.PluginBinary, nil, 0o755)
			}
			err := o.Validate()
			if err == nil {
				err = validateEntry(o.snippet)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			}
			if diff := cmp.Diff(before, readTree(t, conf)); diff != "" {
				t.Errorf("changed (-before +after):\n%s", diff)
			}
			if len(readTree(t, bin)) != 0 {
				t.Errorf("bin folder changed")
			}
		})
	}
	t.Run("unparsable conflist only", func(t *testing.T) {
		conf, bin := t.TempDir(), t.TempDir()
		copyTree(t, filepath.Join("testdata", "invalid-sorts-first", "in"), conf)
		os.Remove(filepath.Join(conf, "10-good.conflist"))
		before := readTree(t, conf)
		in := testInstaller(t, Options{ConfDir: conf, BinDir: bin, WaitTimeout: 300 * time.Millisecond})
		err := in.installOnce(context.Background())
		if err == nil || !strings.Contains(err.Error(), "gave up waiting") {
			t.Errorf("installOnce = %v, want it to wait and give up", err)
		}
		if diff := cmp.Diff(before, readTree(t, conf)); diff != "" {
			t.Errorf("changed (-before +after):\n%s", diff)
		}
	})
}

// TestInvalidFirstFileWaits: while the first file by name is invalid (a
// vendor's half-written file), the installer waits; once it is valid, it
// is the one edited, never the next one.
func TestInvalidFirstFileWaits(t *testing.T) {
	conf, bin := t.TempDir(), t.TempDir()
	copyTree(t, filepath.Join("testdata", "invalid-sorts-first", "in"), conf)
	in := testInstaller(t, Options{ConfDir: conf, BinDir: bin})
	done := make(chan error, 1)
	go func() { done <- in.installOnce(context.Background()) }()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("installOnce returned %v while the first file is invalid; want it to wait", err)
	default:
	}
	good, _ := os.ReadFile(filepath.Join(conf, "10-good.conflist"))
	if strings.Contains(string(good), "netready") {
		t.Fatalf("the installer edited the next file while the first was invalid")
	}
	fixed := `{"cniVersion": "1.1.0", "name": "broken", "plugins": [{"type": "bridge"}]}`
	if err := os.WriteFile(filepath.Join(conf, "00-broken.conflist"), []byte(fixed), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("installOnce: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("installOnce did not install once the first file became valid")
	}
	first, _ := os.ReadFile(filepath.Join(conf, "00-broken.conflist"))
	good, _ = os.ReadFile(filepath.Join(conf, "10-good.conflist"))
	if !strings.Contains(string(first), `"netready"`) || strings.Contains(string(good), "netready") {
		t.Errorf("want netready in 00-broken.conflist only:\n00: %s\n10: %s", first, good)
	}
}

// TestWarnsOnOldCNIVersion: a conflist below 1.1.0 gets a warning naming
// cniVersion, once, and keeps its version.
func TestWarnsOnOldCNIVersion(t *testing.T) {
	conf, bin := t.TempDir(), t.TempDir()
	copyTree(t, filepath.Join("testdata", "old-version", "in"), conf)
	in := testInstaller(t, Options{ConfDir: conf, BinDir: bin})
	var logs strings.Builder
	in.log = slog.New(slog.NewTextHandler(&logs, nil))
	for range 2 {
		if err := in.ensure(); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), `has cniVersion \"0.4.0\", below 1.1.0`); n != 1 {
		t.Errorf("warnings naming cniVersion = %d, want 1; log:\n%s", n, logs.String())
	}
	data, _ := os.ReadFile(filepath.Join(conf, "10-bridge.conflist"))
	if !strings.Contains(string(data), `"cniVersion": "0.4.0"`) {
		t.Errorf("cniVersion changed:\n%s", data)
	}
}

// TestUninstallWatchKeepsTheEntryOut: the uninstall DaemonSet's installer
// takes the entry out, takes it out again when a copy brings it back, and
// leaves it out when stopped.
func TestUninstallWatchKeepsTheEntryOut(t *testing.T) {
	conf := t.TempDir()
	path := filepath.Join(conf, "10-net.conflist")
	with := `{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"ptp"},{"type":"netready"}]}`
	os.WriteFile(path, []byte(with), 0o644)
	in := testInstaller(t, Options{ConfDir: conf, Uninstall: true, Watch: true, Resync: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.watch(ctx) }()
	out := func(what string) {
		t.Helper()
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
			if data, _ := os.ReadFile(path); len(data) > 0 && !strings.Contains(string(data), "netready") {
				return
			}
		}
		data, _ := os.ReadFile(path)
		t.Fatalf("%s: the entry is still there: %s", what, data)
	}
	out("at start")
	os.WriteFile(path+".tmp", []byte(with), 0o644)
	os.Rename(path+".tmp", path)
	out("after a copy brought it back")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch: %v", err)
	}
	if data, _ := os.ReadFile(path); strings.Contains(string(data), "netready") {
		t.Errorf("the entry is back after stop: %s", data)
	}
}

// TestVendorRewriteIsNeverLost: a vendor that rewrites its config between
// the installer's read and its write (a new MTU, IPAM or token) keeps its
// change: the installer writes only over the content it read, and reads
// the file again when it changed. So does uninstall, and the conversion
// of a single-plugin .conf, whether the .conf is rewritten before its
// conflist is written or after, before the .conf goes.
func TestVendorRewriteIsNeverLost(t *testing.T) {
	vendor := func(mtu int) string {
		return fmt.Sprintf(`{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"bridge","mtu":%d,"ipam":{"type":"host-local","subnet":"10.200.0.0/24"}}]}`, mtu)
	}
	single := func(mtu int) string {
		return fmt.Sprintf(`{"cniVersion":"0.4.0","name":"podnet","type":"bridge","mtu":%d,"ipam":{"type":"host-local","subnet":"10.200.0.0/24"}}`, mtu)
	}
	for _, tc := range []struct {
		name, file, before, rewrite string
		uninstall                   bool
		wantFile, wantMTU           string
		wantEntry                   bool
		atRemove                    bool // the rewrite comes before the .conf goes
	}{
		{"install", "10-vendor.conflist", vendor(1500), vendor(9000), false, "10-vendor.conflist", `"mtu":9000`, true, false},
		{"uninstall", "10-vendor.conflist", strings.Replace(vendor(1500), `}}]}`, `}},{"type":"netready"}]}`, 1), strings.Replace(vendor(1400), `}}]}`, `}},{"type":"netready"}]}`, 1), true, "10-vendor.conflist", `"mtu":1400`, false, false},
		{"convert a .conf", "10-ovn.conf", single(1500), single(1400), false, "10-ovn.conflist", `"mtu":1400`, true, false},
		{"a .conf rewritten once converted", "10-ovn.conf", single(1500), single(1400), false, "10-ovn.conflist", `"mtu":1400`, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, tc.file)
			if err := os.WriteFile(path, []byte(tc.before), 0o644); err != nil {
				t.Fatal(err)
			}
			in := testInstaller(t, Options{ConfDir: dir, BinDir: t.TempDir(), Uninstall: tc.uninstall})
			rewrites := 0
			hook := func(string) {
				if rewrites == 0 {
					if err := os.WriteFile(path, []byte(tc.rewrite), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				rewrites++
			}
			if tc.atRemove {
				in.beforeRemove = hook
			} else {
				in.beforeWrite = hook
			}
			var err error
			if tc.uninstall {
				err = in.uninstall()
			} else {
				err = in.ensure()
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, tc.wantFile))
			if err != nil {
				t.Fatal(err)
			}
			compact := strings.Join(strings.Fields(string(got)), "")
			if !strings.Contains(compact, tc.wantMTU) || strings.Contains(compact, `"type":"netready"`) != tc.wantEntry {
				t.Errorf("%s after a vendor rewrite in the window:\n%s\nwant %s, netready entry %v", tc.wantFile, got, tc.wantMTU, tc.wantEntry)
			}
			if rewrites < 2 {
				t.Errorf("the installer wrote without reading the file again (%d writes tried)", rewrites)
			}
			names := readTree(t, dir)
			if len(names) != 1 {
				t.Errorf("files in the folder: %v, want only %s", slices.Sorted(maps.Keys(names)), tc.wantFile)
			}
		})
	}
}

// TestFightBackoff: five reverts within five minutes make the installer
// stop putting the entry back for a minute; after that one revert is
// enough to stop again, for twice as long, up to 30 minutes; an entry
// that stays clears the sidecar's note.
func TestFightBackoff(t *testing.T) {
	state := t.TempDir()
	in := testInstaller(t, Options{ConfDir: t.TempDir(), BinDir: t.TempDir()})
	in.lastStateDir, in.lastNetwork = state, "podnet"
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	in.now = func() time.Time { return now }
	note := filepath.Join(state, "podnet", ".install-backoff")
	for i := range 4 {
		in.noteRevert("/etc/cni/net.d/05-cilium.conflist")
		if in.backingOff() {
			t.Fatalf("backing off after %d reverts, want 5", i+1)
		}
		now = now.Add(time.Second)
	}
	var pauses []time.Duration
	for range 7 {
		in.noteRevert("/etc/cni/net.d/05-cilium.conflist")
		if !in.backingOff() {
			t.Fatal("not backing off")
		}
		pauses = append(pauses, in.fight.backoff)
		if _, err := os.Stat(note); err != nil {
			t.Fatalf("no note for the sidecar while backing off: %v", err)
		}
		now = now.Add(in.fight.backoff)
		if in.backingOff() {
			t.Fatal("still backing off after the pause")
		}
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	if diff := cmp.Diff(want, pauses); diff != "" {
		t.Errorf("pauses (-want +got):\n%s", diff)
	}
	in.settled(false)
	if _, err := os.Stat(note); !os.IsNotExist(err) {
		t.Errorf("the note stays once the entry stays: %v", err)
	}
}
