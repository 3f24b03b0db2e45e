package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// exposition is every series the sidecar exports, with each labelled
// family touched once so that it shows, as a scrape would show it.
func exposition(t *testing.T) (string, []string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.MarkerWait.WithLabelValues("ready").Observe(0.1)
	m.APIErrors.WithLabelValues("Conflict").Inc()
	m.Refused.WithLabelValues("Forbidden").Inc()
	m.Published.WithLabelValues("True").Inc()
	m.PoolFree.WithLabelValues("podnet", "10.0.0.0/24").Set(3)
	m.PoolSize.WithLabelValues("podnet", "10.0.0.0/24").Set(253)
	m.PoolFull.WithLabelValues("podnet", "calico-ipam").Set(0)
	m.AddWait.WithLabelValues("podnet", "ready").Observe(0.2)
	m.PublishLatency.Observe(0.01)
	m.CiliumPropagationUnmeasured.WithLabelValues(UnmeasuredBusy).Inc()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
		expfmt.MetricFamilyToText(&b, f)
	}
	return b.String(), names
}

// TestMonitoringNamesExported: every netready metric that the alerts and
// the dashboard of deploy/components/monitoring query is one the sidecar
// exports. TestMonitoring checks a real scrape with promtool.
func TestMonitoringNamesExported(t *testing.T) {
	_, exported := exposition(t)
	var queried []string
	for _, f := range []string{"prometheusrule.yaml", "dashboard.json"} {
		data, err := os.ReadFile("../../deploy/components/monitoring/" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range regexp.MustCompile(`\bnetready_[a-z_]+`).FindAllString(string(data), -1) {
			queried = append(queried, name)
			base := regexp.MustCompile(`_(bucket|count|sum)$`).ReplaceAllString(name, "")
			if !slices.Contains(exported, name) && !slices.Contains(exported, base) {
				t.Errorf("%s queries %s, which the sidecar does not export", f, name)
			}
		}
	}
	if len(queried) < 8 {
		t.Errorf("found only %d metric names in the rules and the dashboard: %v", len(queried), queried)
	}
}
