//go:build integration

package install

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestInstallerChainsIntoEachStockConflist: netready-install chains netready into the config
// each network plugin writes by default (test/fixtures/stock), leaving
// every vendor plugin and the cniVersion as written, converting ovn-
// kubernetes' single-plugin .conf; takes `status.ipam: "auto"` where it
// can count the chain's pool (Cilium's agent, AWS's ipamd, calico-ipam,
// ovn-kubernetes), saying which
// source it picked, and refuses it elsewhere, naming what the chain uses.
func TestInstallerChainsIntoEachStockConflist(t *testing.T) {
	for _, tc := range []struct {
		dir, file, listFile string
		autoRefused         string // what the refusal of ipam "auto" names
		autoPicked          string // or the source it picks
	}{
		{"calico", "10-calico.conflist", "10-calico.conflist", "", "calico-ipam"},
		{"calico-host-local", "10-calico.conflist", "10-calico.conflist", `subnet "usePodCidr"`, ""},
		{"cilium", "05-cilium.conflist", "05-cilium.conflist", "", "cilium"},
		{"ovn-kubernetes", "10-ovn-kubernetes.conf", "10-ovn-kubernetes.conflist", "", "ovn-kubernetes"},
		{"flannel", "10-flannel.conflist", "10-flannel.conflist", `(type "flannel") has no ipam object`, ""},
		{"k3s", "10-flannel.conflist", "10-flannel.conflist", `(type "flannel") has no ipam object`, ""},
		{"aws", "10-aws.conflist", "10-aws.conflist", "", "aws-vpc-cni"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			stock, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "stock", tc.dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			// k3s keeps its config and binaries in its own folders.
			conf := t.TempDir()
			if tc.dir == "k3s" {
				conf = filepath.Join(conf, "var/lib/rancher/k3s/agent/etc/cni/net.d")
			}
			bin := filepath.Join(t.TempDir(), "opt/cni/bin")
			for _, d := range []string{conf, bin} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			os.WriteFile(filepath.Join(conf, tc.file), stock, 0o644)

			code, out := cnitest.Installer(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"),
				"--config", `{"type":"netready","status":{"ipam":"auto"}}`)
			switch {
			case tc.autoPicked != "":
				if code != 0 || !strings.Contains(out, "source="+tc.autoPicked) {
					t.Errorf("ipam auto on %s: exit %d, want 0 saying it picked %s:\n%s", tc.dir, code, tc.autoPicked, out)
				}
				// The rest of the test starts from the stock file.
				os.WriteFile(filepath.Join(conf, tc.file), stock, 0o644)
			case code != 1 || !strings.Contains(out, tc.autoRefused):
				t.Errorf("ipam auto on %s: exit %d, want 1 naming %q:\n%s", tc.dir, code, tc.autoRefused, out)
			default:
				if got, _ := os.ReadFile(filepath.Join(conf, tc.file)); !bytes.Equal(got, stock) {
					t.Errorf("a refused install changed %s", tc.file)
				}
			}

			if code, out := cnitest.Installer(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready")); code != 0 {
				t.Fatalf("install into %s: exit %d\n%s", tc.dir, code, out)
			}
			got, err := os.ReadFile(filepath.Join(conf, tc.listFile))
			if err != nil {
				t.Fatal(err)
			}
			var before, after struct {
				CNIVersion string            `json:"cniVersion"`
				Name       string            `json:"name"`
				Plugins    []json.RawMessage `json:"plugins"`
				Type       string            `json:"type"`
			}
			json.Unmarshal(stock, &before)
			if err := json.Unmarshal(got, &after); err != nil {
				t.Fatalf("%s after install: %v\n%s", tc.listFile, err, got)
			}
			if before.Type != "" {
				// A single-plugin .conf: its plugin is the chain's first.
				before.Plugins = []json.RawMessage{stock}
			}
			if after.CNIVersion != before.CNIVersion || after.Name != before.Name || len(after.Plugins) != len(before.Plugins)+1 {
				t.Fatalf("%s after install: cniVersion %q name %q with %d plugins; want %q, %q and %d:\n%s",
					tc.listFile, after.CNIVersion, after.Name, len(after.Plugins), before.CNIVersion, before.Name, len(before.Plugins)+1, got)
			}
			if last, _ := lastPluginType(got); last != "netready" {
				t.Errorf("last plugin = %q, want netready", last)
			}
			for i, p := range before.Plugins[:len(before.Plugins)-boolInt(before.Type != "")] {
				if !jsonEqual(t, p, after.Plugins[i]) {
					t.Errorf("plugin %d changed:\nwas %s\nnow %s", i, p, after.Plugins[i])
				}
			}
			if code, out := cnitest.Installer(t, "--validate", filepath.Join(conf, tc.listFile)); code != 0 {
				t.Errorf("--validate of the installed %s: exit %d\n%s", tc.listFile, code, out)
			}
			// --validate of the whole conflist takes or refuses "auto" as well.
			var whole map[string]any
			json.Unmarshal(got, &whole)
			chain := whole["plugins"].([]any)
			chain[len(chain)-1] = map[string]any{"type": "netready", "status": map[string]any{"ipam": "auto"}}
			withAuto, _ := json.Marshal(whole)
			autoFile := filepath.Join(t.TempDir(), tc.listFile)
			os.WriteFile(autoFile, withAuto, 0o644)
			code, out = cnitest.Installer(t, "--validate", autoFile)
			if tc.autoPicked != "" && code != 0 {
				t.Errorf("--validate of %s with ipam auto: exit %d, want 0:\n%s", tc.listFile, code, out)
			}
			if tc.autoPicked == "" && (code != 1 || !strings.Contains(out, tc.autoRefused)) {
				t.Errorf("--validate of %s with ipam auto: exit %d, want 1 naming %q:\n%s", tc.listFile, code, tc.autoRefused, out)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// jsonEqual compares two JSON values as data.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}
