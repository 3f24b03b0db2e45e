//go:build integration

package helm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// TestHelmChartRendersSettleIntoTheEntryWithCilium: crossNode.settle,
// with preset=cilium and crossNode.enabled, is the entry's
// crossNode.settle, in the values' fragment merged over
// 55-cross-node.json, which the real installer's --validate accepts; the
// installer refuses a settle beyond the plugin's 10s, naming it, so the
// chart hands the plugin's bounds on rather than its own. Without
// crossNode.enabled it fails the render, as OVN's keys do.
func TestHelmChartRendersSettleIntoTheEntryWithCilium(t *testing.T) {
	for _, tc := range []struct {
		name, settle string
		sets         []string
		ok           bool
	}{
		{"as a value", "250ms", []string{"--set", "preset=cilium"}, true},
		{"an http check with preset cilium", "250ms", []string{"--set-json", `entry={"checks":[{"kind":"http","preset":"cilium"}]}`}, true},
		{"at the bound", "10s", []string{"--set", "preset=cilium"}, true},
		{"over the bound", "11s", []string{"--set", "preset=cilium"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, data := entryDir(t, append(tc.sets, "--set", "crossNode.enabled=true", "--set", "crossNode.settle="+tc.settle)...)
			if got := fmt.Sprint(data["55-cross-node.json"]); got != "{\"crossNode\": {}}\n" {
				t.Errorf("the entry's 55-cross-node.json = %q, want {\"crossNode\": {}}", got)
			}
			if got, want := fmt.Sprint(data["90-values.json"]), `"crossNode":{"settle":"`+tc.settle+`"}`; !strings.Contains(got, want) {
				t.Errorf("the entry's 90-values.json = %q, want %s in it", got, want)
			}
			code, out := cnitest.Installer(t, "--validate", dir)
			if (code == 0) != tc.ok || (!tc.ok && !strings.Contains(out, `"settle"`)) {
				t.Errorf("netready-install --validate of the rendered entry = exit %d\n%s\nwant ok %v (naming settle)", code, out, tc.ok)
			}
		})
	}
	sets := []string{"--set", "preset=cilium", "--set", "crossNode.settle=250ms"}
	out, err := kube.HelmCmd(t, "", append([]string{"template", "netready", chartDir}, sets...)...)
	if err == nil || !strings.Contains(out, "crossNode.settle") || !strings.Contains(out, "crossNode.enabled=true") {
		t.Errorf("helm template %v = %v\n%s\nwant a failure naming crossNode.settle and crossNode.enabled=true", sets, err, out)
	}
}

// TestHelmChartRefusesCiliumsSettleWithOVN: with ovn-kubernetes, ADD waits on
// OVN's barrier, which confirms what settle would only wait for, so
// crossNode.settle fails the render, named, whether given as a value or
// in entry, and whether OVN comes from the preset or an ovsdb check.
func TestHelmChartRefusesCiliumsSettleWithOVN(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"as a value", []string{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true", "--set", "crossNode.settle=250ms"},
			"crossNode.settle applies to preset=cilium only"},
		{"in entry", []string{"--set", "preset=ovn-kubernetes", "--set-json", `entry={"crossNode":{"settle":"250ms"}}`},
			"entry.crossNode.settle applies to preset=cilium only"},
		{"with an ovsdb check", []string{"--set", "crossNode.enabled=true", "--set", "crossNode.settle=250ms",
			"--set-json", `entry={"checks":[{"kind":"ovsdb","preset":"ovn-kubernetes"}]}`}, "crossNode.settle applies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := kube.HelmCmd(t, "", append([]string{"template", "netready", chartDir}, tc.sets...)...)
			for _, w := range []string{tc.want, "ovn-kubernetes"} {
				if err == nil || !strings.Contains(out, w) {
					t.Errorf("helm template %v = %v\n%s\nwant a failure saying %q", tc.sets, err, out, w)
				}
			}
		})
	}
}

// TestHelmChartCiliumMeasureAddsTheFlagAndListWatchAlone: with preset=cilium,
// crossNode.measure.enabled gives the sidecar
// --measure-cilium-propagation=<nodeSelector> (one argument, whatever the
// selector holds) and the ClusterRole netready-sidecar-cilium-propagation,
// list and watch on ciliumendpoints and no write, bound to the sidecar;
// every other object is as without it, the socket folder mount included.
// It needs no crossNode.enabled, and goes with it.
func TestHelmChartCiliumMeasureAddsTheFlagAndListWatchAlone(t *testing.T) {
	const ds, role, binding = "DaemonSet/default/netready", "ClusterRole//netready-sidecar-cilium-propagation", "ClusterRoleBinding//netready-sidecar-cilium-propagation"
	for _, tc := range []struct {
		name string
		sets []string
		flag string
	}{
		{"the default selector", nil, "--measure-cilium-propagation=netready.io/measure-cilium-propagation=true"},
		{"a selector with spaces and commas", []string{"--set-string", `crossNode.measure.nodeSelector=tier in (edge\,core)`}, "--measure-cilium-propagation=tier in (edge,core)"},
		{"with crossNode", []string{"--set", "crossNode.enabled=true", "--set", "crossNode.settle=1s"}, "--measure-cilium-propagation=netready.io/measure-cilium-propagation=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			without := render(t, append([]string{"--set", "preset=cilium"}, tc.sets...)...)
			with := render(t, append([]string{"--set", "preset=cilium", "--set", "crossNode.measure.enabled=true"}, tc.sets...)...)
			sidecar := dig(with[ds], "spec", "template", "spec", "containers", "name=sidecar").(map[string]any)
			if diff := cmp.Diff([]any{tc.flag}, sidecar["args"]); diff != "" {
				t.Errorf("the sidecar's args (-want +got):\n%s", diff)
			}
			if !strings.Contains(asYAML(sidecar["volumeMounts"]), "mountPath: /var/run/cilium") {
				t.Errorf("the measuring sidecar does not mount /var/run/cilium:\n%s", asYAML(sidecar["volumeMounts"]))
			}
			wantRules := []any{map[string]any{"apiGroups": []any{"cilium.io"}, "resources": []any{"ciliumendpoints"}, "verbs": []any{"list", "watch"}}}
			if diff := cmp.Diff(wantRules, with[role]["rules"]); diff != "" {
				t.Errorf("%s's rules (-want +got):\n%s", role, diff)
			}
			wantBinding := map[string]any{
				"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "netready-sidecar-cilium-propagation"},
				"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "netready-sidecar", "namespace": "default"}},
			}
			if diff := cmp.Diff(wantBinding, map[string]any{"roleRef": with[binding]["roleRef"], "subjects": with[binding]["subjects"]}); diff != "" {
				t.Errorf("%s (-want +got):\n%s", binding, diff)
			}
			checkCiliumRBAC(t, with, "default", true)
			checkCEPReadOnly(t, with)
			// Nothing else: drop what measure adds, and the rest is the
			// render without it.
			delete(sidecar, "args")
			delete(with, role)
			delete(with, binding)
			if diff := cmp.Diff(without, with); diff != "" {
				t.Errorf("crossNode.measure.enabled changes more than the sidecar's args and its ClusterRole (-without +with):\n%s", diff)
			}
		})
	}
	if objs := render(t, "--set", "preset=cilium"); objs[role] != nil || objs[binding] != nil {
		t.Errorf("without crossNode.measure.enabled the chart renders %s", role)
	}
}

// TestHelmChartRefusesMeasureWithoutCilium: crossNode.measure.enabled
// without preset=cilium fails the render, naming the value: the sidecar
// asks its own agent through the socket folder that only preset=cilium
// mounts, so an http check with preset cilium in entry.checks is not
// enough either. The schema refuses an empty selector (the sidecar reads
// it as off) and a key measure does not have.
func TestHelmChartRefusesMeasureWithoutCilium(t *testing.T) {
	for _, sets := range [][]string{
		{},
		{"--set", "preset=calico"},
		{"--set", "preset=ovn-kubernetes"},
		{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true"},
		{"--set-json", `entry={"checks":[{"kind":"http","preset":"cilium"}]}`},
	} {
		sets = append(sets, "--set", "crossNode.measure.enabled=true")
		out, err := kube.HelmCmd(t, "", append([]string{"template", "netready", chartDir}, sets...)...)
		for _, w := range []string{"crossNode.measure.enabled needs preset=cilium", "leave crossNode.measure.enabled false"} {
			if err == nil || !strings.Contains(out, w) {
				t.Errorf("helm template %v = %v\n%s\nwant a failure saying %q", sets, err, out, w)
			}
		}
	}
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"an empty selector", []string{"--set", "crossNode.measure.nodeSelector="}, "/crossNode/measure/nodeSelector"},
		{"a selector over two lines", []string{"--set-json", `crossNode.measure.nodeSelector="a=b\nc=d"`}, "/crossNode/measure/nodeSelector"},
		{"a misspelt key", []string{"--set", "crossNode.measure.nodeSeletor=a=b"}, "nodeSeletor"},
		{"a settle that is no duration", []string{"--set", "crossNode.enabled=true", "--set", "crossNode.settle=1"}, "/crossNode/settle"},
	} {
		sets := append([]string{"--set", "preset=cilium", "--set", "crossNode.measure.enabled=true"}, tc.sets...)
		out, err := kube.HelmCmd(t, "", append([]string{"template", "netready", chartDir}, sets...)...)
		if err == nil || !strings.Contains(out, tc.want) || !strings.Contains(out, "schema") {
			t.Errorf("%s (%v): helm template = %v\n%s\nwant a schema error naming %s", tc.name, sets, err, out, tc.want)
		}
	}
}

// checkCEPReadOnly fails when any ClusterRole in objs grants a verb on
// cilium.io other than get, list and watch: whatever the values, the
// sidecar only reads CiliumEndpoints.
func checkCEPReadOnly(t *testing.T, objs map[string]map[string]any) {
	t.Helper()
	for _, key := range slices.Sorted(maps.Keys(objs)) {
		if !strings.HasPrefix(key, "ClusterRole/") {
			continue
		}
		rules, _ := objs[key]["rules"].([]any)
		for _, r := range rules {
			rule := r.(map[string]any)
			groups := fmt.Sprint(rule["apiGroups"])
			if !strings.Contains(groups, "cilium.io") && !strings.Contains(groups, "*") {
				continue
			}
			for _, v := range rule["verbs"].([]any) {
				if v != "get" && v != "list" && v != "watch" {
					t.Errorf("%s grants %q on %v of cilium.io: the sidecar must only read CiliumEndpoints", key, v, rule["resources"])
				}
			}
		}
	}
}
