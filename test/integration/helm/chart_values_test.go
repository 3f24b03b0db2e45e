//go:build integration

package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// render is `helm template` of the chart with sets, as objects.
func render(t *testing.T, sets ...string) map[string]map[string]any {
	t.Helper()
	return objectsOf(t, kube.MustHelm(t, "", append([]string{"template", "netready", chartDir}, sets...)...))
}

// dig is the value at path (map keys, or "name=X" for the list item of
// that name) in o, or nil.
func dig(o any, path ...string) any {
	for _, p := range path {
		if k, v, ok := strings.Cut(p, "="); ok {
			list, _ := o.([]any)
			o = nil
			for _, item := range list {
				if m, _ := item.(map[string]any); m != nil && m[k] == v {
					o = m
				}
			}
			continue
		}
		m, _ := o.(map[string]any)
		o = m[p]
	}
	return o
}

func asYAML(v any) string {
	b, _ := yaml.Marshal(v)
	return string(b)
}

// TestHelmChartRendersEachOperatorValueWhereItBelongs: each value that
// operators expect of a node agent's chart changes the field it names,
// in the container it names, and nothing rendered by default carries it.
func TestHelmChartRendersEachOperatorValueWhereItBelongs(t *testing.T) {
	const ds = "DaemonSet/default/netready"
	pod := []string{"spec", "template", "spec"}
	sidecar := slices.Concat(pod, []string{"containers", "name=sidecar"})
	install := slices.Concat(pod, []string{"containers", "name=install"})
	// at is base and more, in a list of its own: the table's paths
	// share no backing array.
	at := func(base []string, more ...string) []string { return slices.Concat(base, more) }
	tests := []struct {
		name string
		sets []string
		key  string   // the object
		path []string // the field
		want string   // in the field's YAML
	}{
		{"image.pullPolicy", []string{"--set", "image.pullPolicy=Always"}, ds, at(sidecar, "imagePullPolicy"), "Always"},
		{"image.pullPolicy on the installer", []string{"--set", "image.pullPolicy=Always"}, ds, at(install, "imagePullPolicy"), "Always"},
		{"imagePullSecrets", []string{"--set", "imagePullSecrets[0].name=regcred"}, ds, at(pod, "imagePullSecrets"), "- name: regcred"},
		{"the sidecar's resources", []string{"--set", "resources.sidecar.limits.memory=128Mi"}, ds, at(sidecar, "resources", "limits"), "memory: 128Mi"},
		{"the installer's resources", []string{"--set", "resources.install.requests.cpu=20m"}, ds, at(install, "resources", "requests"), "cpu: 20m"},
		{"nodeSelector", []string{"--set", "nodeSelector.pool=edge"}, ds, at(pod, "nodeSelector"), "pool: edge"},
		{"tolerations", []string{"--set-json", `tolerations=[{"key":"dedicated","operator":"Equal","value":"net","effect":"NoSchedule"}]`}, ds, at(pod, "tolerations"), "key: dedicated"},
		{"affinity", []string{"--set-json", `affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"x","operator":"Exists"}]}]}}}`}, ds, at(pod, "affinity", "nodeAffinity"), "operator: Exists"},
		{"priorityClassName", []string{"--set", "priorityClassName=netready-critical"}, ds, at(pod, "priorityClassName"), "netready-critical"},
		{"podAnnotations", []string{"--set", "podAnnotations.example\\.com/team=net"}, ds, []string{"spec", "template", "metadata", "annotations"}, "example.com/team: net"},
		{"podLabels", []string{"--set", "podLabels.team=net"}, ds, []string{"spec", "template", "metadata", "labels"}, "team: net"},
		{"updateStrategy's maxUnavailable", []string{"--set", "updateStrategy.rollingUpdate.maxUnavailable=10%"}, ds, []string{"spec", "updateStrategy", "rollingUpdate"}, "maxUnavailable: 10%"},
		{"the sidecar's extraArgs", []string{"--set-json", `extraArgs.sidecar=["--unobserved=notready"]`}, ds, at(sidecar, "command"), "- --unobserved=notready"},
		{"the installer's extraArgs", []string{"--set-json", `extraArgs.install=["--cni-version=auto"]`}, ds, at(install, "command"), "- --cni-version=auto"},
		{"the sidecar's extraEnv", []string{"--set-json", `extraEnv.sidecar=[{"name":"GOMAXPROCS","value":"1"}]`}, ds, at(sidecar, "env", "name=GOMAXPROCS"), "value: \"1\""},
		{"the installer's extraEnv", []string{"--set-json", `extraEnv.install=[{"name":"GOMAXPROCS","value":"1"}]`}, ds, at(install, "env", "name=GOMAXPROCS"), "value: \"1\""},
		{"extraVolumes", []string{"--set-json", `extraVolumes=[{"name":"checks","hostPath":{"path":"/run/my-agent"}}]`}, ds, at(pod, "volumes", "name=checks"), "path: /run/my-agent"},
		{"the sidecar's extraVolumeMounts", []string{"--set-json", `extraVolumeMounts.sidecar=[{"name":"checks","mountPath":"/run/my-agent","readOnly":true}]`}, ds, at(sidecar, "volumeMounts", "name=checks"), "mountPath: /run/my-agent"},
		{"the installer's extraVolumeMounts", []string{"--set-json", `extraVolumeMounts.install=[{"name":"checks","mountPath":"/run/my-agent"}]`}, ds, at(install, "volumeMounts", "name=checks"), "mountPath: /run/my-agent"},
		{"crossNode's OVN sockets in the sidecar", []string{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true"}, ds, at(sidecar, "volumeMounts", "name=ovn-db"), "mountPath: /var/run/ovn"},
		{"crossNode's sockets' folder as a volume", []string{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true", "--set", "crossNode.sbSocket=/run/ovn-sb/ovnsb_db.sock"}, ds, at(pod, "volumes", "name=ovn-db-2"), "path: /run/ovn-sb"},
		{"the ServiceMonitor's labels", []string{"--set", "monitoring.enabled=true", "--set", "monitoring.labels.release=kps"}, "ServiceMonitor/default/netready", []string{"metadata", "labels"}, "release: kps"},
		{"the PrometheusRule's labels", []string{"--set", "monitoring.enabled=true", "--set", "monitoring.labels.release=kps"}, "PrometheusRule/default/netready", []string{"metadata", "labels"}, "release: kps"},
		{"the ServiceMonitor's interval", []string{"--set", "monitoring.enabled=true", "--set", "monitoring.interval=15s"}, "ServiceMonitor/default/netready", []string{"spec", "endpoints"}, "interval: 15s"},
	}
	defaults := render(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, ok := render(t, tt.sets...)[tt.key]
			if !ok {
				t.Fatalf("helm template %v renders no %s", tt.sets, tt.key)
			}
			if got := asYAML(dig(o, tt.path...)); !strings.Contains(got, tt.want) {
				t.Errorf("helm template %v: %s's %s =\n%s\nwant it to hold %q", tt.sets, tt.key, strings.Join(tt.path, "."), got, tt.want)
			}
			if d, ok := defaults[tt.key]; ok && strings.Contains(asYAML(dig(d, tt.path...)), tt.want) {
				t.Errorf("the default render's %s %s holds %q already: the test proves nothing", tt.key, strings.Join(tt.path, "."), tt.want)
			}
		})
	}
	t.Run("the dashboard's namespace", func(t *testing.T) {
		for key := range render(t, "--set", "monitoring.enabled=true", "--set", "monitoring.dashboardNamespace=grafana") {
			if strings.HasPrefix(key, "ConfigMap/") && strings.Contains(key, "/netready-dashboard-") && !strings.HasPrefix(key, "ConfigMap/grafana/") {
				t.Errorf("the dashboard is %s, want it in grafana", key)
			}
		}
	})
}

// TestHelmChartPutsEveryObjectInTheReleaseNamespace: with --namespace,
// every namespaced object is there, the sidecar's RBAC bindings name its
// ServiceAccount there, and no object names kube-system.
func TestHelmChartPutsEveryObjectInTheReleaseNamespace(t *testing.T) {
	// Each preset's own RBAC binds the ServiceAccount too.
	for _, preset := range []string{"calico", "cilium"} {
		t.Run(preset, func(t *testing.T) { checkReleaseNamespace(t, "--set", "preset="+preset) })
	}
	t.Run("cilium, measuring", func(t *testing.T) {
		checkReleaseNamespace(t, "--set", "preset=cilium", "--set", "crossNode.measure.enabled=true")
	})
}

// checkReleaseNamespace renders the chart in netready-system with sets,
// monitoring and the pool, and checks every object's namespace and every
// binding's subjects.
func checkReleaseNamespace(t *testing.T, sets ...string) {
	t.Helper()
	out := kube.MustHelm(t, "", append([]string{"template", "netready", chartDir, "--namespace", "netready-system",
		"--set", "monitoring.enabled=true", "--set", "pool.enabled=true"}, sets...)...)
	if strings.Contains(out, "kube-system") {
		t.Errorf("the render with --namespace netready-system names kube-system:\n%s", harness.GrepLines(out, "kube-system"))
	}
	clusterScoped := map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true, "ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true, "MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true}
	for key, o := range objectsOf(t, out) {
		kind, ns := strings.Split(key, "/")[0], strings.Split(key, "/")[1]
		if clusterScoped[kind] != (ns == "") || (ns != "" && ns != "netready-system") {
			t.Errorf("%s: namespace %q, want netready-system for a namespaced object and none otherwise", key, ns)
		}
		if subjects, ok := o["subjects"].([]any); ok {
			for _, s := range subjects {
				if s := s.(map[string]any); s["namespace"] != "netready-system" {
					t.Errorf("%s: subject %v, want the ServiceAccount in netready-system", key, s)
				}
			}
		}
	}
}

// TestHelmChartLeavesTheMutatingPolicyOutWhereTheClusterLacksIt: helm
// template for Kubernetes 1.35 leaves the MutatingAdmissionPolicy and its
// binding out (a default install before 1.36 would fail on them), and
// for 1.36 keeps both.
func TestHelmChartLeavesTheMutatingPolicyOutWhereTheClusterLacksIt(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    bool
	}{{"1.35.0", false}, {"1.36.0", true}} {
		objs := render(t, "--kube-version", tc.version)
		_, policy := objs["MutatingAdmissionPolicy//netready-readiness-gate"]
		_, binding := objs["MutatingAdmissionPolicyBinding//netready-readiness-gate"]
		if policy != tc.want || binding != tc.want {
			t.Errorf("helm template --kube-version %s: the mutating policy %v, its binding %v; want %v", tc.version, policy, binding, tc.want)
		}
		if _, ok := objs["ValidatingAdmissionPolicy//netready-sidecar-scope"]; !ok {
			t.Errorf("helm template --kube-version %s left out the scope policy", tc.version)
		}
	}
}

// TestHelmChartSchemaRefusesWhatTheNodesWouldRefuse: values.schema.json
// refuses, before anything reaches a node, a timeout the plugin refuses
// (0s, or above the contract's 100s), a check with a key its kind
// does not have and crossNode with calico; it accepts the bound itself
// and crossNode with cilium.
func TestHelmChartSchemaRefusesWhatTheNodesWouldRefuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a zero timeout", []string{"--set", "timeout=0s"}, "/timeout"},
		{"a timeout over 100s", []string{"--set", "timeout=101s"}, "/timeout"},
		{"a timeout of 2m", []string{"--set", "timeout=2m"}, "/timeout"},
		{"a check with a misspelt key", []string{"--set-json", `entry={"checks":[{"kind":"file","pth":"/run/x"}]}`}, "pth"},
		{"a check with another kind's key", []string{"--set-json", `entry={"checks":[{"kind":"route","path":"/run/x"}]}`}, "path"},
		{"a check of an unknown kind", []string{"--set-json", `entry={"checks":[{"kind":"addr"}]}`}, "/entry/checks/0/kind"},
		{"an agent with a misspelt key", []string{"--set-json", `entry={"status":{"agents":[{"kind":"file","path":"/x","maxage":"30s"}]}}`}, "maxage"},
		{"crossNode with calico", []string{"--set", "preset=calico", "--set", "crossNode.enabled=true"}, "/crossNode/enabled"},
		{"a relative crossNode socket", []string{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true", "--set", "crossNode.nbSocket=ovnnb_db.sock"}, "/crossNode/nbSocket"},
		{"a crossNode timeout that is no duration", []string{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true", "--set", "crossNode.timeout=5"}, "/crossNode/timeout"},
	} {
		out, err := kube.HelmCmd(t, "", append([]string{"template", "netready", chartDir}, tc.args...)...)
		if err == nil || !strings.Contains(out, tc.want) || !strings.Contains(out, "schema") {
			t.Errorf("%s (%v): helm template = %v\n%s\nwant a schema error naming %s", tc.name, tc.args, err, out, tc.want)
		}
	}
	for _, ok := range [][]string{
		{"--set", "timeout=100s"},
		{"--set", "timeout=1m40s"},
		{"--set", "timeout=500ms"},
		{"--set", "preset=cilium", "--set", "crossNode.enabled=true"},
		{"--set-json", `entry={"checks":[{"kind":"file","path":"/run/x","contains":"ok"},{"kind":"nftables","family":"inet","table":"t","set":"s"},{"kind":"http","url":"http://127.0.0.1:1/ready","expect":[{"path":"a","equals":true}]}]}`},
	} {
		kube.MustHelm(t, "", append([]string{"template", "netready", chartDir}, ok...)...)
	}
}

// TestDeployIsTheChartsRenderAsCommitted: deploy/'s generated files
// (scripts/gendeploy) are what the chart renders now, so that kustomize
// users install what the chart installs; `make generate` rewrites them.
func TestDeployIsTheChartsRenderAsCommitted(t *testing.T) {
	if stale := staleGenerated(t, "../../.."); len(stale) > 0 {
		t.Errorf("deploy/ differs from the chart's render in %v: run `make generate` and commit", stale)
	}
}

// staleGenerated runs the generator on the repository at root into a
// folder of its own and names the files whose committed copy differs.
func staleGenerated(t *testing.T, root string) []string {
	t.Helper()
	root, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("go", "run", "./scripts/gendeploy", "-helm", os.Getenv("NETREADY_HELM"), "-root", root, "-out", out)
	cmd.Dir = "../../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./scripts/gendeploy: %v\n%s", err, b)
	}
	var stale []string
	err = filepath.WalkDir(out, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, path)
		fresh, _ := os.ReadFile(path)
		committed, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil || string(committed) != string(fresh) {
			stale = append(stale, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return stale
}
