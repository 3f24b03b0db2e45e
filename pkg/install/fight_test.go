package install

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netready/netready/pkg/notes"
)

// TestClearsANoteLeftByAnEarlierProcess: a backoff note written by an
// earlier installer goes once this one has the entry in place and is not
// pausing, in both modes, whether it puts the entry back or finds it.
func TestClearsANoteLeftByAnEarlierProcess(t *testing.T) {
	const without = `{"cniVersion":"1.1.0","name":"podnet","plugins":[{"type":"ptp"}]}`
	for _, tc := range []struct{ name, mode, before string }{
		{"conflist, entry put back", ModeConflist, without},
		{"conflist, entry in place", ModeConflist, ""},
		{"plugin-dir", ModePluginDir, without},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, state := t.TempDir(), t.TempDir()
			path := filepath.Join(conf, "10-podnet.conflist")
			os.WriteFile(path, []byte(without), 0o644)
			snippet := `{"type":"netready","stateDir":"` + state + `"}`
			if tc.before == "" {
				// The earlier process put the entry in; the agent left it.
				testInstaller(t, Options{ConfDir: conf, BinDir: t.TempDir(), Config: snippet}).ensure()
			}
			if err := notes.NoteInstallBackoff(state, "podnet", "stops putting it back"); err != nil {
				t.Fatal(err)
			}
			in := testInstaller(t, Options{ConfDir: conf, BinDir: t.TempDir(), Config: snippet, Mode: tc.mode})
			var logs strings.Builder
			in.log = slog.New(slog.NewTextHandler(&logs, nil))
			if err := in.ensure(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(state, "podnet", notes.InstallBackoffFile)); !os.IsNotExist(err) {
				t.Errorf("the earlier process's note stays (%v); log:\n%s", err, logs.String())
			}
		})
	}
}

// TestUninstallNeverBacksOff: however often the entry comes back, the
// uninstall watcher takes it out, and logs a removal only when it made
// one.
func TestUninstallNeverBacksOff(t *testing.T) {
	conf := t.TempDir()
	path := filepath.Join(conf, "10-net.conflist")
	with := `{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"ptp"},{"type":"netready"}]}`
	os.WriteFile(path, []byte(with), 0o644)
	in := testInstaller(t, Options{ConfDir: conf, Uninstall: true, Watch: true, Resync: time.Hour})
	var logs syncBuilder
	in.log = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.watch(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	}()
	out := func(what string) {
		t.Helper()
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
			if data, _ := os.ReadFile(path); len(data) > 0 && !strings.Contains(string(data), "netready") {
				return
			}
		}
		data, _ := os.ReadFile(path)
		t.Fatalf("%s: the entry is still there: %s\nlog:\n%s", what, data, logs.String())
	}
	out("at start")
	const readds = 2 * fightLimit
	for i := range readds {
		os.WriteFile(path+".tmp", []byte(with), 0o644)
		os.Rename(path+".tmp", path)
		out(fmt.Sprintf("re-add %d", i+1))
	}
	if n := strings.Count(logs.String(), "removed netready from the chain"); n != readds+1 {
		t.Errorf("the log says %d removals, want %d:\n%s", n, readds+1, logs.String())
	}
}

// TestVersionResetIsNoRevert: with --cni-version auto, a vendor that
// rewrites its file keeping netready's entry but resetting cniVersion
// gets the version raised again each time, never a backoff or its note,
// and one warning that it resets it.
func TestVersionResetIsNoRevert(t *testing.T) {
	conf, bin, state := t.TempDir(), t.TempDir(), t.TempDir()
	plugin := "#!/bin/sh\necho '{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.3.1\",\"1.0.0\",\"1.1.0\"]}'\n"
	for _, name := range []string{"ptp", "host-local"} {
		os.WriteFile(filepath.Join(bin, name), []byte(plugin), 0o755)
	}
	netready := filepath.Join(t.TempDir(), "netready")
	os.WriteFile(netready, []byte(plugin), 0o755)
	path := filepath.Join(conf, "10-podnet.conflist")
	os.WriteFile(path, []byte(`{"cniVersion":"0.3.1","name":"podnet","plugins":[{"type":"ptp","ipam":{"type":"host-local","subnet":"10.200.7.0/24"}}]}`), 0o644)
	in := testInstaller(t, Options{ConfDir: conf, BinDir: bin, PluginBinary: netready, CNIVersion: CNIVersionAuto,
		Config: `{"type":"netready","stateDir":"` + state + `"}`})
	var logs strings.Builder
	in.log = slog.New(slog.NewTextHandler(&logs, nil))
	version := func() (string, string) {
		var l struct {
			CNIVersion string            `json:"cniVersion"`
			Plugins    []json.RawMessage `json:"plugins"`
		}
		data, _ := os.ReadFile(path)
		json.Unmarshal(data, &l)
		return l.CNIVersion, pluginType(l.Plugins[len(l.Plugins)-1])
	}
	for i := range 3 * fightLimit {
		if err := in.ensure(); err != nil {
			t.Fatal(err)
		}
		if v, last := version(); v != "1.1.0" || last != "netready" {
			t.Fatalf("after reset %d: cniVersion %q, last plugin %q; want 1.1.0, netready\n%s", i, v, last, logs.String())
		}
		data, _ := os.ReadFile(path)
		os.WriteFile(path, []byte(strings.Replace(string(data), `"cniVersion": "1.1.0"`, `"cniVersion": "0.3.1"`, 1)), 0o644)
	}
	if in.backingOff() || strings.Contains(logs.String(), "stops putting it back") {
		t.Errorf("a cniVersion reset counted as a revert:\n%s", logs.String())
	}
	if _, err := os.Stat(filepath.Join(state, "podnet", notes.InstallBackoffFile)); !os.IsNotExist(err) {
		t.Errorf("a backoff note after cniVersion resets: %v", err)
	}
	if n := strings.Count(logs.String(), "another agent keeps resetting cniVersion"); n != 1 {
		t.Errorf("warnings that the vendor resets cniVersion = %d, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "calls STATUS on each of ptp, netready") {
		t.Errorf("the log does not name the plugins whose STATUS the raise turns on:\n%s", logs.String())
	}
}

func pluginType(raw json.RawMessage) string {
	var p struct {
		Type string `json:"type"`
	}
	json.Unmarshal(raw, &p)
	return p.Type
}

// syncBuilder is a log that a watcher writes while the test reads it.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
