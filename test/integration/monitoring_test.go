//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// promtool is Prometheus's promtool that `make test` builds from the module
// proxy (scripts/build-promtool.sh). Its absence fails the test: the
// alerts and the metric names would go unchecked.
func promtool(t *testing.T) string {
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

// checkMetrics runs `promtool check metrics` on a scrape of the sidecar:
// names, units and help as Prometheus's linter wants them.
func checkMetrics(t *testing.T, scrape string) {
	t.Helper()
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on the sidecar's /metrics: %v\n%s", err, out)
	}
}

// TestMonitoring: the monitoring component builds with kubectl kustomize;
// its PrometheusRule's alerts pass `promtool check rules` and the unit tests
// of test/monitoring/rules_test.yaml; the sidecar listens beyond loopback
// for the ServiceMonitor's scrape.
func TestMonitoring(t *testing.T) {
	objs := kustomizeWith(t, "monitoring")
	for _, kind := range []string{"PrometheusRule", "ServiceMonitor", "Service"} {
		if len(objs[kind]) != 1 {
			t.Fatalf("want one %s, got %d", kind, len(objs[kind]))
		}
	}
	if !strings.Contains(strings.Join(objs["ConfigMap"], "\n---\n"), "grafana_dashboard: \"1\"") {
		t.Errorf("no ConfigMap labelled grafana_dashboard holds the dashboard")
	}
	ds := daemonSet(t, objs)
	if listen := envValue(container(ds, "sidecar").Env, "METRICS_LISTEN"); listen != "0.0.0.0:9095" {
		t.Errorf("the sidecar's METRICS_LISTEN = %q, want 0.0.0.0:9095 for the scrape", listen)
	}
	if base := envValue(container(daemonSet(t, kustomizeWith(t)), "sidecar").Env, "METRICS_LISTEN"); base != "127.0.0.1:9095" {
		t.Errorf("without the component the sidecar must listen on loopback only, not %q", base)
	}

	var rule struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(objs["PrometheusRule"][0]), &rule); err != nil {
		t.Fatal(err)
	}
	rules, err := yaml.Marshal(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644)
	mustRun(t, "cp", "../monitoring/rules_test.yaml", dir)
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool(t), args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
	}
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
