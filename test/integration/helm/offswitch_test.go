//go:build integration

package helm

import (
	"testing"
)

// TestHelmChartOffSwitchRendersTheSwitch: offSwitch=true renders what
// kubectl netready off creates, the ConfigMap netready-off in the release
// namespace and the mutating policy's netready-off matchCondition; the
// default renders neither, and the sidecar may read that ConfigMap alone.
func TestHelmChartOffSwitchRendersTheSwitch(t *testing.T) {
	for _, off := range []bool{false, true} {
		sets := []string{"--kube-version", "1.36.0", "--namespace", "netready"}
		if off {
			sets = append(sets, "--set", "offSwitch=true")
		}
		objs := render(t, sets...)
		_, cm := objs["ConfigMap/netready/netready-off"]
		cond := dig(objs["MutatingAdmissionPolicy//netready-readiness-gate"], "spec", "matchConditions", "name=netready-off", "expression")
		if cm != off || (cond == "false") != off {
			t.Errorf("offSwitch=%v: ConfigMap netready-off rendered %v, matchCondition netready-off %v; want both %v", off, cm, cond, off)
		}
		role := objs["Role/netready/netready-sidecar-off-switch"]
		if got := asYAML(dig(role, "rules")); got != "- apiGroups:\n  - \"\"\n  resourceNames:\n  - netready-off\n  resources:\n  - configmaps\n  verbs:\n  - get\n  - list\n  - watch\n" {
			t.Errorf("offSwitch=%v: the sidecar's off switch Role grants:\n%s", off, got)
		}
	}
}
