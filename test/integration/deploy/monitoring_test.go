//go:build integration

package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// serviceMonitor is what the tests read of a ServiceMonitor.
type serviceMonitor struct {
	Metadata struct {
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port        string       `json:"port"`
			Relabelings []relabeling `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type relabeling struct {
	SourceLabels []string `json:"sourceLabels"`
	TargetLabel  string   `json:"targetLabel"`
}

// TestMonitoringRulesPassPromtool: the monitoring component builds with kubectl kustomize;
// its PrometheusRule's alerts pass `promtool check rules` and the unit tests
// of test/monitoring/rules_test.yaml; the sidecar listens beyond loopback
// for the ServiceMonitor's scrape.
func TestMonitoringRulesPassPromtool(t *testing.T) {
	objs := kube.KustomizeWith(t, "monitoring")
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
	if base := envValue(container(daemonSet(t, kube.KustomizeWith(t)), "sidecar").Env, "METRICS_LISTEN"); base != "127.0.0.1:9095" {
		t.Errorf("without the component the sidecar must listen on loopback only, not %q", base)
	}

	// The scrape reaches the sidecar: the Service selects the DaemonSet's
	// pods and targets the sidecar's named port; the ServiceMonitor
	// selects the Service, in its namespace, by that port, and labels
	// each series with its node.
	var svc corev1.Service
	var sm serviceMonitor
	if yaml.Unmarshal([]byte(objs["Service"][0]), &svc) != nil || yaml.Unmarshal([]byte(objs["ServiceMonitor"][0]), &sm) != nil {
		t.Fatal("cannot read the Service or the ServiceMonitor")
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("the Service's selector %v does not select the DaemonSet's pods %v", svc.Spec.Selector, ds.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 || !slices.ContainsFunc(container(ds, "sidecar").Ports, func(p corev1.ContainerPort) bool {
		return p.Name == svc.Spec.Ports[0].TargetPort.String() && p.ContainerPort == 9095
	}) {
		t.Errorf("the Service's port %+v is not the sidecar's 9095", svc.Spec.Ports)
	}
	// Without a namespaceSelector a ServiceMonitor selects in its own
	// namespace, which follows a namespace: override (a listed name
	// would not).
	selects := func(svc corev1.Service, sm serviceMonitor, smNamespace string) bool {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		inNamespace := slices.Contains(sm.Spec.NamespaceSelector.MatchNames, svc.Namespace) ||
			(len(sm.Spec.NamespaceSelector.MatchNames) == 0 && smNamespace == svc.Namespace)
		return err == nil && !sel.Empty() && sel.Matches(labels.Set(svc.Labels)) && inNamespace
	}
	if !selects(svc, sm, sm.Metadata.Namespace) {
		t.Errorf("the ServiceMonitor (%v, %+v, in %s) does not select the Service %s/%s %v", sm.Spec.Selector, sm.Spec.NamespaceSelector, sm.Metadata.Namespace, svc.Namespace, svc.Name, svc.Labels)
	}
	moved := kube.KustomizeOverlay(t, "namespace: monitoring-moved\n", "monitoring")
	var movedSvc corev1.Service
	var movedSM serviceMonitor
	if yaml.Unmarshal([]byte(moved["Service"][0]), &movedSvc) != nil || yaml.Unmarshal([]byte(moved["ServiceMonitor"][0]), &movedSM) != nil {
		t.Fatal("cannot read the moved Service or ServiceMonitor")
	}
	if movedSvc.Namespace != "monitoring-moved" || !selects(movedSvc, movedSM, movedSM.Metadata.Namespace) {
		t.Errorf("under namespace: monitoring-moved the ServiceMonitor (%+v in %s) does not select the Service in %s", movedSM.Spec.NamespaceSelector, movedSM.Metadata.Namespace, movedSvc.Namespace)
	}
	if len(sm.Spec.Endpoints) != 1 || len(svc.Spec.Ports) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name ||
		!slices.ContainsFunc(sm.Spec.Endpoints[0].Relabelings, func(r relabeling) bool {
			return r.TargetLabel == "node" && slices.Equal(r.SourceLabels, []string{"__meta_kubernetes_pod_node_name"})
		}) {
		t.Errorf("the ServiceMonitor's endpoints %+v do not scrape the Service's port with a node label", sm.Spec.Endpoints)
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
	harness.MustRun(t, "cp", "../../monitoring/rules_test.yaml", dir)
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(kube.Promtool(t), args...)
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
