//go:build integration

package helm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// chartDir is charts/netready, the source deploy/'s base is generated
// from (scripts/gendeploy).
const chartDir = "../../../charts/netready"

// helmLabels are the labels the chart adds to every object, and the only
// difference from deploy/ the row comparison forgives.
var helmLabels = []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// objectsOf parses a multi-document render into objects keyed
// kind/namespace/name.
func objectsOf(t *testing.T, render string) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(render, -1) {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("render: %v\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		objs[o["kind"].(string)+"/"+ns+"/"+meta["name"].(string)] = o
	}
	return objs
}

// kustomizeRow renders what a Quick start row's kustomization renders:
// `resources: [deploy]` and its components, beside a copy of deploy/.
func kustomizeRow(t *testing.T, components []string) string {
	t.Helper()
	dir := t.TempDir()
	harness.MustRun(t, "cp", "-r", "../../../deploy", dir)
	return kustomizeIn(t, dir, components)
}

// kustomizeIn is kustomizeRow in dir, which holds deploy/ already.
func kustomizeIn(t *testing.T, dir string, components []string) string {
	t.Helper()
	var comps []string
	for _, c := range components {
		comps = append(comps, "deploy/components/"+c)
	}
	kust := "resources: [deploy]\ncomponents: [" + strings.Join(comps, ", ") + "]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(os.Getenv("NETREADY_K8S_BIN"), "kubectl"), "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize of %s: %v\n%s", kust, err, out)
	}
	return string(out)
}

// valuesOf gives the chart's values for a kustomization's components.
func valuesOf(components []string) []string {
	var sets []string
	for _, c := range components {
		switch c {
		case "calico", "cilium", "ovn-kubernetes":
			sets = append(sets, "--set", "preset="+c)
		case "pool":
			sets = append(sets, "--set", "pool.enabled=true")
		case "cross-node", "cross-node-cilium":
			sets = append(sets, "--set", "crossNode.enabled=true")
		case "cilium-propagation":
			sets = append(sets, "--set", "crossNode.measure.enabled=true")
		case "k3s", "gke":
			sets = append(sets, "--set", "platform="+c)
		case "monitoring":
			sets = append(sets, "--set", "monitoring.enabled=true")
		case "no-mutating-policy":
			sets = append(sets, "--set", "mutatingPolicy.enabled=false")
		case "uninstall":
			sets = append(sets, "--set", "uninstall=true")
		}
	}
	return sets
}

// quickStartRow is a row of the README's Quick start table.
type quickStartRow struct {
	plugin     string
	components []string
	// helm is the row's `helm install` line's flags, when it has one.
	helm []string
}

// quickStartRows reads the README's Quick start table: each row's
// `components: [...]` and, if the row gives one, its `helm install` line.
func quickStartRows(t *testing.T) []quickStartRow {
	t.Helper()
	data, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return parseQuickStartRows(t, string(data))
}

func parseQuickStartRows(t *testing.T, section string) []quickStartRow {
	t.Helper()
	if i := strings.Index(section, "## Quick start"); i >= 0 {
		section = section[i:]
		if j := strings.Index(section[3:], "\n## "); j >= 0 {
			section = section[:j+3]
		}
	}
	compsRe := regexp.MustCompile("`components: \\[([^\\]]*)\\]`")
	helmRe := regexp.MustCompile("`helm (?:install|upgrade --install) ([^`]*)`")
	var rows []quickStartRow
	for _, line := range strings.Split(section, "\n") {
		m := compsRe.FindStringSubmatch(line)
		if !strings.HasPrefix(line, "|") || m == nil {
			continue
		}
		row := quickStartRow{plugin: strings.TrimSpace(strings.Split(line, "|")[1])}
		for _, c := range strings.Split(m[1], ",") {
			row.components = append(row.components, strings.TrimPrefix(strings.TrimSpace(c), "deploy/components/"))
		}
		if h := helmRe.FindStringSubmatch(line); h != nil {
			row.helm = []string{}
			f := strings.Fields(h[1])
			for i := 0; i < len(f); i++ {
				flag, value, inline := strings.Cut(f[i], "=")
				if flag != "--set" && flag != "--set-string" && flag != "--set-json" {
					continue
				}
				if !inline && i+1 < len(f) {
					i++
					value = f[i]
				}
				row.helm = append(row.helm, flag, strings.Trim(value, `'"`))
			}
		}
		rows = append(rows, row)
	}
	if len(rows) < 3 {
		t.Fatalf("found %d Quick start rows with a `components: [...]` kustomization in README.md, want Calico, Cilium and ovn-kubernetes", len(rows))
	}
	return rows
}

// comparable strips what may differ between the two renders: the labels
// the chart adds (after checking they are there), whitespace runs in
// CEL expressions, and the order of named list items. kustomize's YAML
// reader (go-yaml v3) keeps one more line break than Helm's (go-yaml v2)
// before a more-indented line of a folded scalar (`>-`), as
// admission.yaml's expressions have; CEL reads both alike. kustomize's
// strategic merge puts a component's containers, env and volumes before
// the base's; the chart keeps the base's first, and a pod means the same
// either way.
func comparable(t *testing.T, objs map[string]map[string]any, fromHelm bool) map[string]map[string]any {
	t.Helper()
	for key, o := range objs {
		meta := o["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		if fromHelm {
			for _, l := range helmLabels {
				if _, ok := labels[l]; !ok {
					t.Errorf("%s: the chart did not label it %s", key, l)
				}
				delete(labels, l)
			}
			if labels != nil && len(labels) == 0 {
				delete(meta, "labels")
			}
		}
		squashCEL(o)
		sortNamed(o)
	}
	return objs
}

// sortNamed sorts, everywhere in v, the lists of containers, env,
// volumes and volumeMounts by name.
func sortNamed(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if list, ok := x.([]any); ok && slices.Contains([]string{"containers", "initContainers", "env", "volumes", "volumeMounts"}, k) {
				slices.SortStableFunc(list, func(a, b any) int {
					an, _ := a.(map[string]any)["name"].(string)
					bn, _ := b.(map[string]any)["name"].(string)
					return strings.Compare(an, bn)
				})
			}
			sortNamed(x)
		}
	case []any:
		for _, x := range v {
			sortNamed(x)
		}
	}
}

func squashCEL(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && (k == "expression" || k == "messageExpression") {
				v[k] = strings.Join(strings.Fields(s), " ")
				continue
			}
			squashCEL(x)
		}
	case []any:
		for _, x := range v {
			squashCEL(x)
		}
	}
}

// TestHelmChartPassesLintStrict runs `helm lint --strict` on the chart,
// with its defaults and with every value the Quick start and the
// components set.
func TestHelmChartPassesLintStrict(t *testing.T) {
	for _, sets := range [][]string{
		nil,
		valuesOf([]string{"calico", "pool", "k3s", "monitoring", "no-mutating-policy"}),
		valuesOf([]string{"cilium", "gke"}),
		valuesOf([]string{"ovn-kubernetes", "uninstall"}),
		valuesOf([]string{"ovn-kubernetes", "cross-node"}),
		valuesOf([]string{"cilium", "cross-node-cilium"}),
		valuesOf([]string{"cilium", "cross-node-cilium", "cilium-propagation"}),
	} {
		out := kube.MustHelm(t, "", append([]string{"lint", "--strict", chartDir}, sets...)...)
		if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm lint --strict %v:\n%s", sets, out)
		}
	}
}

// TestHelmChartRendersEachQuickStartRowAsItsKustomization: for each row
// of the README's Quick start, and for the components composed, the
// chart with the row's values renders the objects `kubectl kustomize`
// renders of the row's kustomization, field for field, the chart's
// labels aside. The entry ConfigMap's hashed name is kustomize's too, so
// the DaemonSet refers to the same name.
func TestHelmChartRendersEachQuickStartRowAsItsKustomization(t *testing.T) {
	rows := quickStartRows(t)
	rows = append(rows,
		quickStartRow{plugin: "deploy/ alone"},
		quickStartRow{plugin: "every component", components: []string{"calico", "pool", "k3s", "monitoring", "no-mutating-policy"}},
		quickStartRow{plugin: "gke", components: []string{"cilium", "gke"}},
		quickStartRow{plugin: "uninstall", components: []string{"calico", "pool", "uninstall"}},
		quickStartRow{plugin: "uninstall without the mutating policy", components: []string{"ovn-kubernetes", "no-mutating-policy", "uninstall"}},
		quickStartRow{plugin: "ovn-kubernetes across nodes", components: []string{"ovn-kubernetes", "cross-node"}},
		quickStartRow{plugin: "cilium across nodes", components: []string{"cilium", "cross-node-cilium"}},
		quickStartRow{plugin: "cilium across nodes, measured", components: []string{"cilium", "cross-node-cilium", "cilium-propagation"}},
		quickStartRow{plugin: "cilium measured, uninstalling", components: []string{"cilium", "cilium-propagation", "uninstall"}})
	for _, row := range rows {
		t.Run(row.plugin, func(t *testing.T) {
			sets := row.helm
			if sets == nil {
				sets = valuesOf(row.components)
			}
			want := comparable(t, objectsOf(t, kustomizeRow(t, row.components)), false)
			got := comparable(t, objectsOf(t, kube.MustHelm(t, "", append([]string{"template", "netready", chartDir, "--namespace", "kube-system"}, sets...)...)), true)
			if len(want) < 10 {
				t.Fatalf("kustomize rendered %d objects", len(want))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("helm template %v differs from the kustomization of %v (-kustomize +helm):\n%s", sets, row.components, diff)
			}
		})
	}
}

// TestHelmChartRefusesUnknownAndMistypedValues: values.schema.json makes
// helm refuse a value it does not know, or of the wrong type, naming it,
// before anything is rendered.
func TestHelmChartRefusesUnknownAndMistypedValues(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"an unknown top-level key", []string{"--set", "preest=calico"}, "preest"},
		{"an unknown nested key", []string{"--set", "monitoring.enable=true"}, "enable"},
		{"an unknown entry key", []string{"--set-json", `entry={"tiemout":"5s"}`}, "tiemout"},
		{"a number for the timeout", []string{"--set", "timeout=10"}, "/timeout"},
		{"a timeout that is no duration", []string{"--set", "timeout=soon"}, "/timeout"},
		{"an unknown preset", []string{"--set", "preset=calco"}, "/preset"},
		{"a string for a switch", []string{"--set", "pool.enabled=yes"}, "/pool/enabled"},
		{"a negative minFree", []string{"--set", "pool.minFree=-1"}, "/pool/minFree"},
		{"an unknown onTimeout", []string{"--set", "onTimeout=wait"}, "/onTimeout"},
		{"an unknown platform", []string{"--set", "platform=k8s"}, "/platform"},
	}
	for _, tt := range tests {
		out, err := kube.HelmCmd(t, "", append([]string{"template", "netready", chartDir}, tt.args...)...)
		if err == nil || !strings.Contains(out, tt.want) || !strings.Contains(out, "schema") {
			t.Errorf("%s (%v): helm template = %v\n%s\nwant a schema error naming %s", tt.name, tt.args, err, out, tt.want)
		}
	}
}

// TestHelmChartRefusesADeployItCannotRenderAsKustomizeWould: the chart
// is deploy/'s source, so a generated file of deploy/ edited by hand, which
// kustomize would render and the chart would not, fails the generated
// copy's check, naming the file, rather than letting the two drift apart.
func TestHelmChartRefusesADeployItCannotRenderAsKustomizeWould(t *testing.T) {
	dir := t.TempDir()
	harness.MustRun(t, "cp", "-r", "../../../deploy", dir)
	harness.MustRun(t, "mkdir", "-p", filepath.Join(dir, "charts"))
	harness.MustRun(t, "cp", "-r", chartDir, filepath.Join(dir, "charts"))
	if stale := staleGenerated(t, dir); len(stale) > 0 {
		t.Fatalf("a fresh copy of the repository is stale in %v", stale)
	}
	ds := filepath.Join(dir, "deploy", "daemonset.yaml")
	data, err := os.ReadFile(ds)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ds, []byte(strings.Replace(string(data), "hostNetwork: true", "hostNetwork: true\n      dnsPolicy: ClusterFirstWithHostNet", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if stale := staleGenerated(t, dir); !slices.Equal(stale, []string{"deploy/daemonset.yaml"}) {
		t.Errorf("with deploy/daemonset.yaml edited by hand, the stale files are %v, want [deploy/daemonset.yaml]", stale)
	}
}

// TestReleaseHoldsTheChartPinnedToItsVersion: the release `make test`
// builds holds netready-VERSION.tgz, in SHA256SUMS, whose chart is
// VERSION and renders, with the Calico row's values, what the release's
// own deploy/ (pinned to VERSION) renders for that row.
func TestReleaseHoldsTheChartPinnedToItsVersion(t *testing.T) {
	dist, version := harness.ReleaseDir(t)
	name := "netready-" + version + ".tgz"
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil || !strings.Contains(string(sums), "  "+name+"\n") {
		t.Fatalf("SHA256SUMS does not list %s (%v):\n%s", name, err, sums)
	}
	tgz := filepath.Join(dist, name)
	chart := kube.MustHelm(t, "", "show", "chart", tgz)
	for _, want := range []string{"version: " + version, "appVersion: " + version} {
		if !strings.Contains(chart, want+"\n") {
			t.Errorf("%s's Chart.yaml lacks %q:\n%s", name, want, chart)
		}
	}
	dir := t.TempDir()
	harness.MustRun(t, "tar", "-xzf", filepath.Join(dist, "netready-"+version+"-deploy.tar.gz"), "-C", dir)
	row := []string{"calico"}
	want := comparable(t, objectsOf(t, kustomizeIn(t, dir, row)), false)
	render := kube.MustHelm(t, "", append([]string{"template", "netready", tgz, "--namespace", "kube-system"}, valuesOf(row)...)...)
	got := comparable(t, objectsOf(t, render), true)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s differs from the release's deploy/ with components/calico (-kustomize +helm):\n%s", name, diff)
	}
	if !strings.Contains(render, "image: ghcr.io/netready/netready:"+version+"\n") {
		t.Errorf("%s does not run ghcr.io/netready/netready:%s", name, version)
	}
}

// TestHelmChartValuesReachTheObjectsTheyName: each value the Quick start
// rows leave at its default changes the object it names, and a pool
// setting without the pool switched on fails the render instead of being
// dropped.
func TestHelmChartValuesReachTheObjectsTheyName(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name string
		sets []string
		kind string // the object, by kind and name prefix
		want []string
	}{
		{"the image's tag", []string{"--set", "image.tag=v9.9.9"}, "DaemonSet/kube-system/netready",
			[]string{"image: ghcr.io/netready/netready:v9.9.9"}},
		{"the image's repository and digest", []string{"--set", "image.repository=registry.example/netready", "--set", "image.digest=" + digest}, "DaemonSet/kube-system/netready",
			[]string{"image: registry.example/netready@" + digest}},
		{"the condition type", []string{"--set", "conditionType=example.com/net-ready"}, "ConfigMap/kube-system/netready-settings",
			[]string{"conditionType: example.com/net-ready"}},
		{"onTimeout and timeout", []string{"--set", "onTimeout=fail", "--set", "timeout=30s"}, "ConfigMap/kube-system/netready-entry-",
			[]string{`90-values.json: |` + "\n" + `    {"onTimeout":"fail","timeout":"30s"}`}},
		{"the pool's source and minFree", []string{"--set", "pool.enabled=true", "--set", "pool.minFree=3", "--set-json", `pool.ipam={"type":"calico-ipam"}`}, "ConfigMap/kube-system/netready-entry-",
			[]string{`60-pool.json`, `{"status":{"ipam":{"type":"calico-ipam"},"minFree":3}}`}},
		{"crossNode's bounds", []string{"--set", "preset=ovn-kubernetes", "--set", "crossNode.enabled=true", "--set", "crossNode.timeout=1s", "--set", "crossNode.stallAfter=4s"}, "ConfigMap/kube-system/netready-entry-",
			[]string{`55-cross-node.json`, `{"crossNode":{"stallAfter":"4s","timeout":"1s"}}`}},
		{"extra entry keys", []string{"--set-json", `entry={"logFile":"/var/log/n.log","status":{"failAfter":"1m"}}`}, "ConfigMap/kube-system/netready-entry-",
			[]string{`{"logFile":"/var/log/n.log","status":{"failAfter":"1m"}}`}},
		{"monitoring without the dashboard", []string{"--set", "monitoring.enabled=true", "--set", "monitoring.dashboard=false"}, "ServiceMonitor/kube-system/netready",
			[]string{"port: metrics"}},
	}
	for _, tt := range tests {
		objs := objectsOf(t, kube.MustHelm(t, "", append([]string{"template", "netready", chartDir, "--namespace", "kube-system"}, tt.sets...)...))
		var found []byte
		for key, o := range objs {
			if strings.HasPrefix(key, tt.kind) {
				found, _ = yaml.Marshal(o)
			}
			if strings.HasPrefix(key, "ConfigMap/kube-system/netready-dashboard") && slices.Contains(tt.sets, "monitoring.dashboard=false") {
				t.Errorf("%s: the dashboard is rendered", tt.name)
			}
		}
		for _, w := range tt.want {
			if !strings.Contains(string(found), w) {
				t.Errorf("%s (%v): %s lacks %q:\n%s", tt.name, tt.sets, tt.kind, w, found)
			}
		}
	}
	out, err := kube.HelmCmd(t, "", "template", "netready", chartDir, "--set", "pool.minFree=2")
	if err == nil || !strings.Contains(out, "pool.enabled=true") {
		t.Errorf("helm template with pool.minFree and no pool = %v\n%s\nwant a failure saying to set pool.enabled=true", err, out)
	}
}

// TestHelmChartPoolIPAMTakesEachSourcesKeys: pool.ipam takes each
// source's own keys, as the plugin does: Calico's four for calico-ipam,
// host-local's object with its ranges. The rendered entry passes the real
// installer's --validate. The schema refuses, naming the key, a host-local
// object without ranges or with them misspelt, and a boolean where Calico
// takes a string.
func TestHelmChartPoolIPAMTakesEachSourcesKeys(t *testing.T) {
	for _, tc := range []struct {
		name, ipam string
		want       string // in the rendered entry
	}{
		{"calico-ipam with Calico's keys", `{"type":"calico-ipam","assign_ipv4":"false","assign_ipv6":"true","ipv4_pools":["default-ipv4-ippool"],"ipv6_pools":["fd00:10:200::/48"]}`,
			`"assign_ipv6":"true"`},
		{"host-local with its ranges", `{"type":"host-local","ranges":[[{"subnet":"10.200.9.0/24"}]],"dataDir":"/var/lib/cni/networks"}`,
			`"ranges":[[{"subnet":"10.200.9.0/24"}]]`},
	} {
		objs := objectsOf(t, kube.MustHelm(t, "", "template", "netready", chartDir, "--namespace", "kube-system", "--set", "pool.enabled=true", "--set-json", "pool.ipam="+tc.ipam))
		var data map[string]any
		for key, o := range objs {
			if strings.HasPrefix(key, "ConfigMap/kube-system/netready-entry-") {
				data, _ = o["data"].(map[string]any)
			}
		}
		// The values' fragment, merged last over the component's "auto".
		if !strings.Contains(fmt.Sprint(data["90-values.json"]), tc.want) {
			t.Errorf("%s: the entry's 90-values.json = %v, want %s", tc.name, data["90-values.json"], tc.want)
		}
		dir := t.TempDir()
		for k, v := range data {
			if err := os.WriteFile(filepath.Join(dir, k), []byte(fmt.Sprint(v)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if code, out := cnitest.Installer(t, "--validate", dir); code != 0 {
			t.Errorf("%s: netready-install --validate of the rendered entry = exit %d\n%s", tc.name, code, out)
		}
	}
	for _, tc := range []struct {
		name, ipam, want string
	}{
		{"host-local without ranges", `{"type":"host-local"}`, "ranges"},
		{"host-local with ranges misspelt", `{"type":"host-local","rnages":[[{"subnet":"10.200.9.0/24"}]]}`, "rnages"},
		{"calico-ipam with a boolean", `{"type":"calico-ipam","assign_ipv6":true}`, "assign_ipv6"},
		{"cilium with aws's key", `{"type":"cilium","url":"http://127.0.0.1:61679"}`, "url"},
	} {
		out, err := kube.HelmCmd(t, "", "template", "netready", chartDir, "--set", "pool.enabled=true", "--set-json", "pool.ipam="+tc.ipam)
		if err == nil || !strings.Contains(out, tc.want) || !strings.Contains(out, "schema") {
			t.Errorf("%s: helm template = %v\n%s\nwant a schema error naming %s", tc.name, err, out, tc.want)
		}
	}
}
