//go:build integration

package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

func daemonSet(t *testing.T, objs map[string][]string) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	if len(objs["DaemonSet"]) != 1 || yaml.Unmarshal([]byte(objs["DaemonSet"][0]), &ds) != nil {
		t.Fatalf("want one DaemonSet, got %d", len(objs["DaemonSet"]))
	}
	return &ds
}

// validatedEntry is the build's netready-entry ConfigMap, whose keys, as
// files, the real netready-install --validate has checked, as the
// installer sees them on a node.
func validatedEntry(t *testing.T, objs map[string][]string) corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	for _, doc := range objs["ConfigMap"] {
		yaml.Unmarshal([]byte(doc), &cm)
		if strings.HasPrefix(cm.Name, "netready-entry-") {
			break
		}
	}
	entryDir := t.TempDir()
	for k, v := range cm.Data {
		os.WriteFile(filepath.Join(entryDir, k), []byte(v), 0o644)
	}
	out := harness.MustRun(t, filepath.Join(harness.BinDir, "netready-install"), "--validate", entryDir)
	if !strings.HasSuffix(strings.TrimSpace(out), ": ok") {
		t.Errorf("--validate: %s", out)
	}
	return cm
}

func container(ds *appsv1.DaemonSet, name string) corev1.Container {
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	return corev1.Container{}
}

// TestEveryComponentBuildsAndValidates: every component of deploy/ builds with kubectl kustomize,
// alone and composed; a preset component's entry passes the installer's
// --validate with its preset, and the sidecar gets the agent's folder for
// its re-checks; pool mounts host-local's folder; each cross-node
// component goes with its preset's (testCrossNodeComponents), and so does
// the propagation meter (testCiliumPropagationComponent); uninstall
// turns both containers and the mutating policy around.
func TestEveryComponentBuildsAndValidates(t *testing.T) {
	mounts := map[string]string{"calico": "/var/run/calico", "cilium": "/var/run/cilium", "ovn-kubernetes": "/var/run/openvswitch", "pool": "/var/lib/cni/networks"}
	for _, c := range []string{"calico", "cilium", "ovn-kubernetes", "pool"} {
		for _, with := range [][]string{{c}, {c, "pool"}} {
			if c == "pool" && len(with) == 2 {
				continue
			}
			t.Run(strings.Join(with, "+"), func(t *testing.T) {
				objs := kube.KustomizeWith(t, with...)
				ds := daemonSet(t, objs)
				for _, comp := range with {
					if !slices.ContainsFunc(container(ds, "sidecar").VolumeMounts, func(m corev1.VolumeMount) bool {
						return m.MountPath == mounts[comp] && m.ReadOnly
					}) {
						t.Errorf("the sidecar has no read-only mount of %s", mounts[comp])
					}
				}
				cm := validatedEntry(t, objs)
				if c != "pool" && !strings.Contains(cm.Data["50-preset.json"], `"preset": "`+c+`"`) {
					t.Errorf("entry %s has no preset %q: %v", cm.Name, c, cm.Data)
				}
				if slices.Contains(with, "pool") && !strings.Contains(cm.Data["60-pool.json"], `"ipam": "auto"`) {
					t.Errorf("entry %s has no pool status: %v", cm.Name, cm.Data)
				}
				if vols := ds.Spec.Template.Spec.Volumes; !slices.ContainsFunc(vols, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == cm.Name }) {
					t.Errorf("the DaemonSet does not mount %s", cm.Name)
				}
			})
		}
	}
	t.Run("cross-node", testCrossNodeComponents)
	t.Run("cilium-propagation", testCiliumPropagationComponent)
	t.Run("no-mutating-policy", func(t *testing.T) {
		objs, base := kube.KustomizeWith(t, "calico", "no-mutating-policy"), kube.KustomizeWith(t, "calico")
		if len(objs["MutatingAdmissionPolicy"])+len(objs["MutatingAdmissionPolicyBinding"]) != 0 ||
			len(objs["ValidatingAdmissionPolicy"]) != len(base["ValidatingAdmissionPolicy"]) || len(base["ValidatingAdmissionPolicy"]) == 0 {
			t.Errorf("want no mutating policy and every validating one (%d): %d, %d, %d", len(base["ValidatingAdmissionPolicy"]),
				len(objs["MutatingAdmissionPolicy"]), len(objs["MutatingAdmissionPolicyBinding"]), len(objs["ValidatingAdmissionPolicy"]))
		}
	})
	t.Run("uninstall", func(t *testing.T) {
		objs := kube.KustomizeWith(t, "calico", "pool", "uninstall")
		ds := daemonSet(t, objs)
		install, sidecar := container(ds, "install").Command, container(ds, "sidecar").Command
		if !slices.Contains(install, "--uninstall") || !slices.Contains(install, "--watch") || !slices.Contains(sidecar, "--uninstall") {
			t.Errorf("install %v and sidecar %v do not both run --uninstall", install, sidecar)
		}
		if !slices.ContainsFunc(objs["MutatingAdmissionPolicy"], func(doc string) bool {
			return strings.Contains(doc, "name: netready-uninstalling") && strings.Contains(doc, "expression: \"false\"")
		}) {
			t.Errorf("the mutating policy still matches while uninstalling:\n%s", objs["MutatingAdmissionPolicy"])
		}
		// The sidecar's pod keeps its mounts and identity: it still
		// publishes and lifts the taint under the same policies.
		if ds.Spec.Template.Spec.ServiceAccountName != "netready-sidecar" || len(container(ds, "sidecar").VolumeMounts) == 0 {
			t.Errorf("the uninstall DaemonSet lost the sidecar's identity or mounts")
		}
		// With monitoring on, the sidecar stays scrapable while it
		// uninstalls, so NetreadyDown does not fire for a slow roll-out.
		if !slices.Contains(sidecar, "--listen=$(METRICS_LISTEN)") {
			t.Errorf("the uninstalling sidecar does not listen on METRICS_LISTEN: %v", sidecar)
		}
		monitored := container(daemonSet(t, kube.KustomizeWith(t, "calico", "pool", "monitoring", "uninstall")), "sidecar")
		if listen := envValue(monitored.Env, "METRICS_LISTEN"); listen != "0.0.0.0:9095" || !slices.Contains(monitored.Command, "--listen=$(METRICS_LISTEN)") {
			t.Errorf("with monitoring, the uninstalling sidecar listens on %q (%v), want 0.0.0.0:9095", listen, monitored.Command)
		}
	})
}
