//go:build integration

package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// entryDir renders the chart with sets and writes the entry ConfigMap's
// fragments into a folder, as the installer reads them on a node.
func entryDir(t *testing.T, sets ...string) (string, map[string]any) {
	t.Helper()
	var data map[string]any
	for key, o := range render(t, sets...) {
		if strings.HasPrefix(key, "ConfigMap/default/netready-entry-") {
			data, _ = o["data"].(map[string]any)
		}
	}
	if data == nil {
		t.Fatalf("helm template %v renders no netready-entry", sets)
	}
	dir := t.TempDir()
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(fmt.Sprint(v)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, data
}

// TestHelmChartTurnsCrossNodeOnWithOneKey: crossNode.enabled=true with
// the ovn-kubernetes preset is all it takes: the entry gets crossNode,
// which the real installer's --validate accepts (with the plugin's
// defaults, and under proceed with stallAfter beyond the timeout), and the
// sidecar gets OVN's socket folder, read-only (also for a crossNode
// given in entry). The installer refuses the
// same bounds under onTimeout fail, so the chart hands the plugin's rules
// on rather than its own. Off by default; refused without a preset that
// has a cross-node part (calico, none), and its keys without the switch
// fail the render. Cilium's is TestHelmChartTurnsCrossNodeOnWithCilium.
func TestHelmChartTurnsCrossNodeOnWithOneKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		ok   bool
		want string // in the installer's output when it refuses
	}{
		{"the plugin's defaults", []string{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true"}, true, ""},
		{"proceed, stallAfter beyond the timeout", []string{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true",
			"--set", "crossNode.timeout=500ms", "--set", "crossNode.stallAfter=4s"}, true, ""},
		{"fail, stallAfter beyond the timeout", []string{"--set", "preset=ovn-kubernetes", "--set", "onTimeout=fail", "--set", "crossNode.enabled=true",
			"--set", "crossNode.timeout=500ms", "--set", "crossNode.stallAfter=4s"}, false, "stallAfter"},
		{"raiseInterval at once", []string{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true", "--set", "crossNode.raiseInterval=0s"}, true, ""},
		{"raiseInterval over its bound", []string{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true", "--set", "crossNode.raiseInterval=2s"}, false, "raiseInterval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, data := entryDir(t, tc.sets...)
			if !strings.Contains(fmt.Sprint(data["55-cross-node.json"]), `"crossNode"`) {
				t.Errorf("the entry's fragments %v lack 55-cross-node.json with crossNode", data)
			}
			code, out := cnitest.Installer(t, "--validate", dir)
			if (code == 0) != tc.ok || !strings.Contains(out, tc.want) {
				t.Errorf("netready-install --validate of the rendered entry = exit %d\n%s\nwant ok %v (naming %q)", code, out, tc.ok, tc.want)
			}
		})
	}
	// A crossNode given in entry instead gets the mount too: without it
	// the sidecar could never tell, and pending pods would stay not Ready.
	for _, sets := range [][]string{
		{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true"},
		{"--set", "preset=ovn-kubernetes", "--set-json", `entry={"crossNode":{}}`},
	} {
		ds := render(t, sets...)["DaemonSet/default/netready"]
		mount := asYAML(dig(ds, "spec", "template", "spec", "containers", "name=sidecar", "volumeMounts", "name=ovn-db"))
		if !strings.Contains(mount, "mountPath: /var/run/ovn") || !strings.Contains(mount, "readOnly: true") {
			t.Errorf("helm template %v: the sidecar's ovn-db mount = %s, want /var/run/ovn read-only", sets, mount)
		}
	}

	_, data := entryDir(t, "--set", "preset=ovn-kubernetes")
	for k, v := range data {
		if strings.Contains(fmt.Sprint(v), "crossNode") {
			t.Errorf("by default the entry's %s holds crossNode: %v", k, v)
		}
	}
	if got := dig(render(t, "--set", "preset=ovn-kubernetes")["DaemonSet/default/netready"], "spec", "template", "spec", "volumes", "name=ovn-db"); got != nil {
		t.Errorf("by default the DaemonSet has the ovn-db volume: %v", got)
	}

	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"no preset and no ovsdb check", []string{"--set", "crossNode.enabled=true"}, "preset=ovn-kubernetes or cilium"},
		{"crossNode in entry with calico", []string{"--set", "preset=calico", "--set-json", `entry={"crossNode":{}}`}, "preset=ovn-kubernetes or cilium"},
		{"both OVN's and Cilium's checks", []string{"--set", "preset=cilium", "--set", "crossNode.enabled=true", "--set-json", `entry={"checks":[{"kind":"ovsdb"}]}`}, "both ovn-kubernetes and cilium"},
		{"a key without the switch", []string{"--set", "preset=ovn-kubernetes", "--set", "crossNode.stallAfter=2s"}, "crossNode.enabled=true"},
	} {
		out, err := kube.HelmCmd(t, "", append([]string{"template", "netready", chartDir}, tc.sets...)...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s (%v): helm template = %v\n%s\nwant a failure naming %s", tc.name, tc.sets, err, out, tc.want)
		}
	}
}
