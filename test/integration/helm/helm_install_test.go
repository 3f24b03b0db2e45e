//go:build integration

package helm

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/test/harness/kube"
)

// TestHelmInstallUpgradeRollbackAndUninstallOnARealAPIServer runs the
// chart's life on a real kube-apiserver: install creates every object the
// chart renders; an upgrade that changes the timeout changes the entry
// and so the DaemonSet's pod template (it would roll); rollback restores
// both; uninstall leaves nothing, cluster-scoped admission policies and
// bindings included.
func TestHelmInstallUpgradeRollbackAndUninstallOnARealAPIServer(t *testing.T) {
	a := kube.StartAPIServer(t)
	kc := a.Kubeconfig("admin", kube.AdminToken)
	// The harness applied deploy/rbac.yaml; the chart must own it.
	a.Kubectl(t, "delete", "-f", "../../../deploy/rbac.yaml", "--ignore-not-found")
	helmArgs := func(verb string, sets ...string) []string {
		return append([]string{verb, "netready", chartDir, "--namespace", "kube-system"}, sets...)
	}
	installed := []string{"--set", "preset=calico", "--set", "pool.enabled=true"}
	upgraded := append(slices.Clone(installed), "--set", "timeout=25s")

	// The objects of a render, as kubectl names them.
	names := func(sets []string) []string {
		var out []string
		for _, o := range objectsOf(t, kube.MustHelm(t, "", helmArgs("template", sets...)...)) {
			meta := o["metadata"].(map[string]any)
			ns, _ := meta["namespace"].(string)
			out = append(out, strings.Join([]string{o["kind"].(string), ns, meta["name"].(string)}, "/"))
		}
		slices.Sort(out)
		return out
	}
	get := func(key string) (string, error) {
		p := strings.SplitN(key, "/", 3)
		args := []string{"get", p[0], p[2], "-o", "json"}
		if p[1] != "" {
			args = append(args, "-n", p[1])
		}
		return a.KubectlRun(args...)
	}
	// entryOf returns the DaemonSet's entry ConfigMap, and its data.
	entryOf := func(t *testing.T) (string, map[string]string, int64) {
		t.Helper()
		var ds struct {
			Metadata struct{ Generation int64 }
			Spec     struct {
				Template struct {
					Spec struct {
						Volumes []struct {
							Name      string
							ConfigMap *struct{ Name string }
						}
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(a.Kubectl(t, "get", "daemonset", "netready", "-n", "kube-system", "-o", "json")), &ds); err != nil {
			t.Fatal(err)
		}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == "entry" && v.ConfigMap != nil {
				var cm struct{ Data map[string]string }
				if err := yaml.Unmarshal([]byte(a.Kubectl(t, "get", "configmap", v.ConfigMap.Name, "-n", "kube-system", "-o", "json")), &cm); err != nil {
					t.Fatal(err)
				}
				return v.ConfigMap.Name, cm.Data, ds.Metadata.Generation
			}
		}
		t.Fatal("the DaemonSet has no entry volume")
		return "", nil, 0
	}

	out := kube.MustHelm(t, kc, helmArgs("install", installed...)...)
	for _, want := range []string{"STATUS: deployed", "rollout status daemonset/netready", "kubectl netready status", "readiness-gate=enabled"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm install's notes lack %q:\n%s", want, out)
		}
	}
	t.Run("the first gated pod of the notes gets the gate", func(t *testing.T) {
		var run []string
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			switch {
			case strings.HasPrefix(l, "     kubectl create namespace "), strings.HasPrefix(l, "     kubectl label namespace "):
				a.Kubectl(t, f[1:]...)
				if f[2] == "namespace" && f[1] == "create" {
					// No controller-manager makes the namespace's ServiceAccount.
					a.Kubectl(t, "create", "serviceaccount", "default", "-n", f[3])
				}
			case strings.HasPrefix(l, "     kubectl -n demo run "):
				run = f[1:]
			}
		}
		if run == nil {
			t.Fatalf("the notes give no pod to run:\n%s", out)
		}
		// The mutating policy is live once a dry run is gated.
		for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
			got, err := a.KubectlRun(append(run, "--dry-run=server", "-o", "jsonpath={.spec.readinessGates}")...)
			if err == nil && strings.Contains(got, "networking.kubernetes.io/pod-network-ready") {
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("kubectl %s: %v %s; want the readiness gate", strings.Join(run, " "), err, got)
			}
		}
	})
	first := names(installed)
	t.Run("install creates every object the chart renders", func(t *testing.T) {
		for _, key := range first {
			if out, err := get(key); err != nil {
				t.Errorf("%s after helm install: %v\n%s", key, err, out)
			}
		}
		if len(first) < 10 || !slices.Contains(first, "MutatingAdmissionPolicy//netready-readiness-gate") {
			t.Errorf("the chart rendered %v", first)
		}
	})
	name1, data1, gen1 := entryOf(t)
	if data1["50-preset.json"] == "" || data1["60-pool.json"] == "" || data1["90-values.json"] != "" {
		t.Errorf("installed entry %s = %v, want deploy/'s fragments with calico's and the pool's, and no 90-values.json", name1, data1)
	}

	kube.MustHelm(t, kc, helmArgs("upgrade", upgraded...)...)
	name2, data2, gen2 := entryOf(t)
	t.Run("upgrade changes the entry and rolls the DaemonSet", func(t *testing.T) {
		if !strings.Contains(data2["90-values.json"], `"timeout":"25s"`) {
			t.Errorf("upgraded entry %s = %v, want 90-values.json with the timeout 25s", name2, data2)
		}
		if name2 == name1 || gen2 <= gen1 {
			t.Errorf("upgrade: the pod template's entry %s -> %s, generation %d -> %d; want a new ConfigMap and a new generation", name1, name2, gen1, gen2)
		}
		if out, err := get("ConfigMap/kube-system/" + name1); err == nil {
			t.Errorf("the old entry %s outlived the upgrade:\n%s", name1, out)
		}
	})

	kube.MustHelm(t, kc, "rollback", "netready", "1", "--namespace", "kube-system")
	name3, data3, gen3 := entryOf(t)
	t.Run("rollback restores the first entry and pod template", func(t *testing.T) {
		if name3 != name1 || !cmp.Equal(data3, data1) || gen3 <= gen2 {
			t.Errorf("after rollback: entry %s %v, generation %d; want %s %v and a generation above %d", name3, data3, gen3, name1, data1, gen2)
		}
		if out, err := get("ConfigMap/kube-system/" + name2); err == nil {
			t.Errorf("the upgrade's entry %s outlived the rollback:\n%s", name2, out)
		}
		if h := kube.MustHelm(t, kc, "history", "netready", "--namespace", "kube-system"); !strings.Contains(h, "Rollback to 1") {
			t.Errorf("helm history:\n%s", h)
		}
	})

	kube.MustHelm(t, kc, "uninstall", "netready", "--namespace", "kube-system", "--wait", "--timeout", "1m")
	t.Run("uninstall leaves no object behind", func(t *testing.T) {
		for _, key := range slices.Concat(first, names(upgraded)) {
			if out, err := get(key); err == nil || !strings.Contains(out, "NotFound") {
				t.Errorf("%s after helm uninstall: %v\n%s", key, err, out)
			}
		}
		// Listed, not looked up by name: nothing of any name is left.
		left := a.Kubectl(t, "get", "validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings", "-o", "name")
		left += a.Kubectl(t, "get", "clusterroles,clusterrolebindings", "-l", "app.kubernetes.io/instance=netready", "-o", "name")
		// kube-apiserver keeps its own ConfigMap in kube-system; every
		// name of the chart's, and of Helm's release Secrets, has netready.
		for _, l := range strings.Fields(a.Kubectl(t, "get", "configmaps,daemonsets,serviceaccounts,roles,rolebindings,services,secrets", "-n", "kube-system", "-o", "name")) {
			if strings.Contains(l, "netready") {
				left += l + "\n"
			}
		}
		if strings.TrimSpace(left) != "" {
			t.Errorf("left after helm uninstall:\n%s", left)
		}
	})
}

// TestHelmInstallsOnKubernetes134WithTheMutatingPolicyOff: on a real
// kube-apiserver 1.34, which has no MutatingAdmissionPolicy, the chart's
// default install leaves the mutating policy off by itself, its notes
// say so and put the gate in the pod's spec, and it installs everything
// else, the validating policies included; mutatingPolicy.enabled=false
// does the same.
func TestHelmInstallsOnKubernetes134WithTheMutatingPolicyOff(t *testing.T) {
	a := kube.StartAPIServerOf(t, filepath.Join("1.34", "kube-apiserver"))
	kc := a.Kubeconfig("admin", kube.AdminToken)
	a.Kubectl(t, "delete", "-f", "../../../deploy/rbac.yaml", "--ignore-not-found")
	for _, sets := range [][]string{nil, {"--set", "mutatingPolicy.enabled=false"}} {
		out := kube.MustHelm(t, kc, append([]string{"install", "netready", chartDir, "--namespace", "kube-system"}, sets...)...)
		if sets == nil && !strings.Contains(out, "Left out: the MutatingAdmissionPolicy") {
			t.Errorf("the default install's notes on 1.34 do not say the mutating policy was left out:\n%s", out)
		}
		if !strings.Contains(out, `"readinessGates":[{"conditionType":"networking.kubernetes.io/pod-network-ready"}]`) {
			t.Errorf("helm install %v on 1.34: the notes' first pod has no readiness gate in its spec:\n%s", sets, out)
		}
		got := strings.Fields(a.Kubectl(t, "get", "validatingadmissionpolicies,validatingadmissionpolicybindings", "-o", "name"))
		if len(got) < 4 {
			t.Errorf("on 1.34 with %v: admission objects %v, want netready's validating policies and bindings", sets, got)
		}
		if out, err := a.KubectlRun("get", "daemonset", "netready", "-n", "kube-system"); err != nil {
			t.Errorf("the DaemonSet on 1.34 with %v: %v\n%s", sets, err, out)
		}
		kube.MustHelm(t, kc, "uninstall", "netready", "--namespace", "kube-system", "--wait", "--timeout", "1m")
	}
}
