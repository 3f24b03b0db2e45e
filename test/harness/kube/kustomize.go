//go:build integration

package kube

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/netready/netready/test/harness"
)

// KustomizeWith builds deploy/ composed with components by the real
// `kubectl kustomize`, as an operator's kustomization beside deploy/ does,
// and returns the objects by kind.
func KustomizeWith(t *testing.T, components ...string) map[string][]string {
	t.Helper()
	return KustomizeOverlay(t, "", components...)
}

// KustomizeOverlay is KustomizeWith with more lines in the operator's
// kustomization, such as a namespace: override.
func KustomizeOverlay(t *testing.T, extra string, components ...string) map[string][]string {
	t.Helper()
	dir := t.TempDir()
	harness.MustRun(t, "cp", "-r", harness.RepoPath("deploy"), dir)
	var comps []string
	for _, c := range components {
		comps = append(comps, "deploy/components/"+c)
	}
	os.WriteFile(filepath.Join(dir, "kustomization.yaml"),
		[]byte(extra+"resources: [deploy]\ncomponents: ["+strings.Join(comps, ", ")+"]\n"), 0o644)
	out, err := exec.Command(filepath.Join(os.Getenv("NETREADY_K8S_BIN"), "kubectl"), "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize with %v: %v\n%s", components, err, out)
	}
	objs := map[string][]string{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var meta struct{ Kind string }
		yaml.Unmarshal([]byte(doc), &meta)
		objs[meta.Kind] = append(objs[meta.Kind], doc)
	}
	return objs
}

// Promtool is Prometheus's promtool that `make test` builds from the module
// proxy (scripts/build-promtool.sh). Its absence fails the test: the
// alerts and the metric names would go unchecked.
func Promtool(t *testing.T) string {
	t.Helper()
	path := os.Getenv("NETREADY_PROMTOOL")
	if path == "" {
		t.Fatal("NETREADY_PROMTOOL must name promtool; run `make test` (it builds it with `make promtool`)")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("NETREADY_PROMTOOL: %v; run `make promtool`", err)
	}
	return path
}

// CheckMetrics runs `promtool check metrics` on a scrape of the sidecar:
// names, units and help as Prometheus's linter wants them.
func CheckMetrics(t *testing.T, scrape string) {
	t.Helper()
	cmd := exec.Command(Promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on the sidecar's /metrics: %v\n%s", err, out)
	}
}
