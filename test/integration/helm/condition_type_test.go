//go:build integration

package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// renderedTypes is where a render carries the condition type: the
// sidecar's CONDITION_TYPE in the DaemonSet's pod template, and the
// literal of the scope policy and of the mutating policy ("" when the
// render has none).
type renderedTypes struct {
	Sidecar, Scope, Gate string
	// Template is the DaemonSet's pod template, whole.
	Template map[string]any
}

func typesOf(t *testing.T, render string) renderedTypes {
	t.Helper()
	var r renderedTypes
	// A policy without the literal (v0.5 read params) says so.
	literal := func(o map[string]any) string {
		vars, _ := o["spec"].(map[string]any)["variables"].([]any)
		for _, v := range vars {
			if v, _ := v.(map[string]any); v["name"] == "conditionType" {
				if e, _ := v["expression"].(string); strings.HasPrefix(e, "'") && strings.HasSuffix(e, "'") {
					return strings.Trim(e, "'")
				}
			}
		}
		return "no literal"
	}
	for key, o := range objectsOf(t, render) {
		switch {
		case strings.HasPrefix(key, "DaemonSet/"):
			r.Template = o["spec"].(map[string]any)["template"].(map[string]any)
			for _, c := range r.Template["spec"].(map[string]any)["containers"].([]any) {
				c := c.(map[string]any)
				if c["name"] != "sidecar" {
					continue
				}
				for _, e := range c["env"].([]any) {
					if e := e.(map[string]any); e["name"] == "CONDITION_TYPE" {
						r.Sidecar, _ = e["value"].(string)
					}
				}
			}
		case key == "ValidatingAdmissionPolicy//netready-sidecar-scope":
			r.Scope = literal(o)
		case key == "MutatingAdmissionPolicy//netready-readiness-gate":
			r.Gate = literal(o)
		}
	}
	return r
}

// TestAChangedConditionTypeRollsTheSidecars: the condition type is what
// the sidecar reads at start, so it is in the DaemonSet's pod template: two
// renders with different types differ there, both with the chart
// (--set conditionType) and with the README's kustomize overlay
// (netready-settings merged, components/condition-type), and in each the
// sidecar, the scope policy and the gate policy carry the same type, with
// the mutating policy left out too.
func TestAChangedConditionTypeRollsTheSidecars(t *testing.T) {
	const def, custom = "networking.kubernetes.io/pod-network-ready", "example.com/net-ready"
	overlay := func(t *testing.T, typ string, components ...string) string {
		dir := t.TempDir()
		harness.MustRun(t, "cp", "-r", "../../../deploy", dir)
		kust := "resources: [deploy]\ncomponents: [" + strings.Join(append(components, "deploy/components/condition-type"), ", ") + "]\n" +
			"configMapGenerator:\n  - name: netready-settings\n    namespace: kube-system\n    behavior: merge\n    literals: [conditionType=" + typ + "]\n"
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(filepath.Join(os.Getenv("NETREADY_K8S_BIN"), "kubectl"), "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize of\n%s: %v\n%s", kust, err, out)
		}
		return string(out)
	}
	chart := func(t *testing.T, typ string, sets ...string) string {
		return kube.MustHelm(t, "", append([]string{"template", "netready", chartDir, "--namespace", "kube-system", "--set", "conditionType=" + typ}, sets...)...)
	}
	for _, tc := range []struct {
		name   string
		render func(t *testing.T, typ string) string
		noGate bool
	}{
		{"kustomize", func(t *testing.T, typ string) string { return overlay(t, typ, "deploy/components/calico") }, false},
		{"kustomize without the mutating policy", func(t *testing.T, typ string) string {
			return overlay(t, typ, "deploy/components/no-mutating-policy")
		}, true},
		{"the chart", func(t *testing.T, typ string) string { return chart(t, typ, "--set", "preset=calico") }, false},
		{"the chart without the mutating policy", func(t *testing.T, typ string) string {
			return chart(t, typ, "--set", "mutatingPolicy.enabled=false")
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := typesOf(t, tc.render(t, def)), typesOf(t, tc.render(t, custom))
			if cmp.Equal(before.Template, after.Template) {
				t.Errorf("the DaemonSet's pod template is the same with %s and %s: a changed type would not roll the sidecars", def, custom)
			}
			for typ, r := range map[string]renderedTypes{def: before, custom: after} {
				want := renderedTypes{Sidecar: typ, Scope: typ, Gate: typ}
				if tc.noGate {
					want.Gate = ""
				}
				r.Template = nil
				if diff := cmp.Diff(want, r); diff != "" {
					t.Errorf("with %s, the types in the render (-want +got):\n%s", typ, diff)
				}
			}
		})
	}
}
