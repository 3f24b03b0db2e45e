//go:build integration

package helm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// TestHelmChartTurnsCrossNodeOnWithCilium: with Cilium (preset=cilium, or
// an http check with preset cilium), crossNode.enabled=true renders the
// entry fragment 55-cross-node.json as {"crossNode": {}}, which the real
// installer's --validate accepts, and mounts none of OVN's sockets: the
// sidecar reads the pod's CiliumEndpoint from the API server, with the
// ClusterRole netready-sidecar-cilium (get on ciliumendpoints, nothing
// else) that preset=cilium renders, crossNode or not.
func TestHelmChartTurnsCrossNodeOnWithCilium(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sets       []string
		frag, want string // the fragment that holds crossNode, and its text
	}{
		{"preset cilium", []string{"--set", "preset=cilium", "--set", "crossNode.enabled=true"}, "55-cross-node.json", "{\"crossNode\": {}}\n"},
		{"crossNode in entry", []string{"--set", "preset=cilium", "--set-json", `entry={"crossNode":{}}`}, "90-values.json", "{\"crossNode\":{}}\n"},
		{"an http check with preset cilium", []string{"--set", "crossNode.enabled=true", "--set-json", `entry={"checks":[{"kind":"http","preset":"cilium"}]}`}, "55-cross-node.json", "{\"crossNode\": {}}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, data := entryDir(t, tc.sets...)
			if got := data[tc.frag]; got != tc.want {
				t.Errorf("the entry's %s = %q, want %q (fragments %v)", tc.frag, got, tc.want, data)
			}
			if code, out := cnitest.Installer(t, "--validate", dir); code != 0 {
				t.Errorf("netready-install --validate of the rendered entry = exit %d\n%s", code, out)
			}
			objs := render(t, tc.sets...)
			if ovn := ovnMounts(objs["DaemonSet/default/netready"]); len(ovn) > 0 {
				t.Errorf("with Cilium the DaemonSet mounts OVN's sockets: %v", ovn)
			}
			checkCiliumRBAC(t, objs, "default", true)
		})
	}
	// The RBAC comes with the preset, so that a crossNode set by hand in
	// an entry fragment of the operator's own finds it.
	checkCiliumRBAC(t, render(t, "--set", "preset=cilium"), "default", true)
	for _, preset := range []string{"", "calico", "ovn-kubernetes"} {
		checkCiliumRBAC(t, render(t, "--set", "preset="+preset), "default", false)
	}
}

// TestHelmChartRefusesOVNsCrossNodeKeysWithCilium: with Cilium, ADD does
// not wait across nodes, so each key that bounds or steers OVN's wait
// fails the render, named, whether given as a value or in entry, as the
// plugin would refuse it on every node.
func TestHelmChartRefusesOVNsCrossNodeKeysWithCilium(t *testing.T) {
	cilium := []string{"--set", "preset=cilium", "--set", "crossNode.enabled=true"}
	tests := []struct {
		name string
		sets []string
		want []string
	}{
		{"timeout", []string{"--set", "crossNode.timeout=5s"}, []string{"crossNode.timeout applies to preset=ovn-kubernetes only"}},
		{"stallAfter", []string{"--set", "crossNode.stallAfter=3s"}, []string{"crossNode.stallAfter applies"}},
		{"raiseInterval", []string{"--set", "crossNode.raiseInterval=0s"}, []string{"crossNode.raiseInterval applies"}},
		{"nbSocket", []string{"--set", "crossNode.nbSocket=/var/run/ovn/ovnnb_db.sock"}, []string{"crossNode.nbSocket applies"}},
		{"sbSocket", []string{"--set", "crossNode.sbSocket=/var/run/ovn/ovnsb_db.sock"}, []string{"crossNode.sbSocket applies"}},
		{"two keys", []string{"--set", "crossNode.timeout=5s", "--set", "crossNode.sbSocket=/run/sb.sock"}, []string{"crossNode.timeout, crossNode.sbSocket apply to preset=ovn-kubernetes only"}},
		{"a key in entry", []string{"--set-json", `entry={"crossNode":{"stallAfter":"3s"}}`}, []string{"entry.crossNode.stallAfter applies"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sets := append(append([]string{}, cilium...), tt.sets...)
			out, err := kube.HelmCmd(t, "", append([]string{"template", "netready", chartDir}, sets...)...)
			for _, w := range append(tt.want, "ADD does not wait across nodes") {
				if err == nil || !strings.Contains(out, w) {
					t.Errorf("helm template %v = %v\n%s\nwant a failure saying %q", sets, err, out, w)
				}
			}
		})
	}
	// Calico has no cross-node part: the schema refuses the switch, and
	// the template a crossNode given in entry.
	for _, sets := range [][]string{
		{"--set", "preset=calico", "--set", "crossNode.enabled=true"},
		{"--set", "preset=calico", "--set-json", `entry={"crossNode":{}}`},
	} {
		if out, err := kube.HelmCmd(t, "", append([]string{"template", "netready", chartDir}, sets...)...); err == nil || !strings.Contains(out, "crossNode") {
			t.Errorf("helm template %v = %v\n%s\nwant a failure naming crossNode", sets, err, out)
		}
	}
}

// ovnMounts are the DaemonSet's volumes named ovn-db* and the sidecar's
// mounts under /var/run/ovn.
func ovnMounts(ds map[string]any) []string {
	var found []string
	vols, _ := dig(ds, "spec", "template", "spec", "volumes").([]any)
	for _, v := range vols {
		if name := fmt.Sprint(v.(map[string]any)["name"]); strings.HasPrefix(name, "ovn-db") {
			found = append(found, "volume "+name)
		}
	}
	mounts, _ := dig(ds, "spec", "template", "spec", "containers", "name=sidecar", "volumeMounts").([]any)
	for _, m := range mounts {
		if path := fmt.Sprint(m.(map[string]any)["mountPath"]); strings.HasPrefix(path, "/var/run/ovn") {
			found = append(found, "mount "+path)
		}
	}
	return found
}

// checkCiliumRBAC checks that objs hold netready-sidecar-cilium, the
// ClusterRole with get on ciliumendpoints and nothing else, bound to the
// sidecar's ServiceAccount in ns, when want, and neither otherwise.
func checkCiliumRBAC(t *testing.T, objs map[string]map[string]any, ns string, want bool) {
	t.Helper()
	role, hasRole := objs["ClusterRole//netready-sidecar-cilium"]
	binding, hasBinding := objs["ClusterRoleBinding//netready-sidecar-cilium"]
	if hasRole != want || hasBinding != want {
		t.Errorf("the ClusterRole netready-sidecar-cilium rendered %v, its binding %v; want %v", hasRole, hasBinding, want)
		return
	}
	if !want {
		return
	}
	wantRules := []any{map[string]any{"apiGroups": []any{"cilium.io"}, "resources": []any{"ciliumendpoints"}, "verbs": []any{"get"}}}
	if diff := cmp.Diff(wantRules, role["rules"]); diff != "" {
		t.Errorf("netready-sidecar-cilium's rules (-want +got):\n%s", diff)
	}
	wantBinding := map[string]any{
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "netready-sidecar-cilium"},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "netready-sidecar", "namespace": ns}},
	}
	if diff := cmp.Diff(wantBinding, map[string]any{"roleRef": binding["roleRef"], "subjects": binding["subjects"]}); diff != "" {
		t.Errorf("netready-sidecar-cilium's binding (-want +got):\n%s", diff)
	}
}
