//go:build integration

package install

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netready/netready/pkg/notes"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestInstallerClearsANoteLeftByAnEarlierProcess: a real netready-install
// backs off from an exclusive agent and leaves its note; the operator
// does what it says (the agent keeps chained plugins, or --mode
// plugin-dir) and the DaemonSet rolls. The new real installer puts the
// entry back and clears the note, in both modes, so the sidecar no longer
// holds pods for a backoff that is over.
func TestInstallerClearsANoteLeftByAnEarlierProcess(t *testing.T) {
	own, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "stock", "cilium", "05-cilium.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"conflist", "plugin-dir"} {
		t.Run(mode, func(t *testing.T) {
			conf, bin, state := t.TempDir(), t.TempDir(), t.TempDir()
			entry := `{"type":"netready","stateDir":"` + state + `"}`
			note := filepath.Join(state, "cilium", notes.InstallBackoffFile)
			t.Run("the earlier installer backs off", func(t *testing.T) {
				// The agent and the installer stop when this subtest ends.
				exclusiveAgent(t, conf, own)
				_, logs := startInstaller(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"),
					"--config", entry, "--watch")
				harness.Eventually(t, "the installer backs off and leaves its note", func() (bool, string) {
					_, err := os.Stat(note)
					return err == nil, logs.String()
				})
			})
			if t.Failed() {
				return
			}
			if _, err := os.Stat(note); err != nil {
				t.Fatalf("the earlier installer's note is gone before the new one starts: %v", err)
			}
			_, logs := startInstaller(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"),
				"--config", entry, "--watch", "--mode", mode)
			harness.Eventually(t, "the new installer puts the entry back and clears the note", func() (bool, string) {
				_, err := os.Stat(note)
				return os.IsNotExist(err) && entryInPlace(conf, mode), logs.String()
			})
			if strings.Contains(logs.String(), "stops putting it back") {
				t.Errorf("the new installer backed off itself:\n%s", logs.String())
			}
		})
	}
}

// entryInPlace: netready last in the Cilium conflist, or its plugin-dir
// file in place.
func entryInPlace(conf, mode string) bool {
	if mode == "plugin-dir" {
		_, err := os.Stat(filepath.Join(conf, "cilium", "netready.conf"))
		return err == nil
	}
	data, err := os.ReadFile(filepath.Join(conf, "05-cilium.conflist"))
	last, _ := lastPluginType(data)
	return err == nil && last == "netready"
}

// TestInstallerRaisesAResetCNIVersionWithoutBackingOff: a vendor that
// rewrites its conflist keeping netready's entry but resetting cniVersion
// (from its own template) is not removing netready: the real
// netready-install --cni-version auto raises the version again each time,
// after the real reference plugins answered VERSION, never backs off nor
// leaves a note, warns that the vendor resets it, and names each plugin
// whose STATUS the raise turns on.
func TestInstallerRaisesAResetCNIVersionWithoutBackingOff(t *testing.T) {
	conf, bin, state := t.TempDir(), cnitest.PluginDir(t, "bridge", "host-local", "portmap"), t.TempDir()
	path := filepath.Join(conf, "10-autonet.conflist")
	writeAtomic(t, path, []byte(`{"cniVersion":"0.3.1","name":"autonet","plugins":[{"type":"bridge","bridge":"nrauto1","ipam":{"type":"host-local","subnet":"10.200.252.0/24"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`))
	_, logs := startInstaller(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"),
		"--config", `{"type":"netready","stateDir":"`+state+`"}`, "--cni-version", "auto", "--watch", "--resync", "1h")
	raised := func() (bool, string) {
		data, err := os.ReadFile(path)
		var l struct {
			CNIVersion string `json:"cniVersion"`
		}
		json.Unmarshal(data, &l)
		last, _ := lastPluginType(data)
		return err == nil && l.CNIVersion == "1.1.0" && last == "netready", string(data) + "\n" + logs.String()
	}
	harness.Eventually(t, "the first raise", raised)
	const resets = 3 * 5 // five reverts within five minutes would be a fight
	for i := range resets {
		data := mustRead(t, path)
		reset := strings.Replace(string(data), `"cniVersion": "1.1.0"`, `"cniVersion": "0.3.1"`, 1)
		if reset == string(data) || !strings.Contains(reset, `"type": "netready"`) {
			t.Fatalf("reset %d: no cniVersion 1.1.0 to reset, or no entry to keep:\n%s", i, data)
		}
		writeAtomic(t, path, []byte(reset))
		harness.Eventually(t, "cniVersion raised again", raised)
	}
	if _, err := os.Stat(filepath.Join(state, "autonet", notes.InstallBackoffFile)); !os.IsNotExist(err) {
		t.Errorf("a backoff note after cniVersion resets (%v):\n%s", err, logs.String())
	}
	if strings.Contains(logs.String(), "stops putting it back") {
		t.Errorf("the installer took cniVersion resets for a fight:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "another agent keeps resetting cniVersion") {
		t.Errorf("no warning that the vendor resets cniVersion:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "calls STATUS on each of bridge, portmap, netready") {
		t.Errorf("the log does not name the plugins whose STATUS the raise turns on:\n%s", logs.String())
	}
}
