//go:build integration

package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestPlatformComponentsPointAtThePlatformsFolders: deploy/'s platform components, built by the real
// kubectl kustomize in either order with the pool component, point the
// DaemonSet's two CNI volumes (the one place the folders are set) at the
// platform's folders, and k3s tells the plugin its config folder through
// an entry fragment that netready-install --validate accepts merged.
func TestPlatformComponentsPointAtThePlatformsFolders(t *testing.T) {
	kubectl := filepath.Join(os.Getenv("NETREADY_K8S_BIN"), "kubectl")
	for _, tc := range []struct {
		component, conf, bin, fragment string
	}{
		{"k3s", "/var/lib/rancher/k3s/agent/etc/cni/net.d", "/var/lib/rancher/k3s/data/current/bin", "70-k3s.json"},
		{"gke", "/etc/cni/net.d", "/home/kubernetes/bin", ""},
	} {
		for _, order := range [][]string{{tc.component, "pool"}, {"pool", tc.component}} {
			t.Run(strings.Join(order, "+"), func(t *testing.T) {
				dir := t.TempDir()
				harness.MustRun(t, "cp", "-r", "../../../deploy", dir)
				kust := "resources: [deploy]\ncomponents: [deploy/components/" + order[0] + ", deploy/components/" + order[1] + "]\n"
				os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644)
				out := harness.MustRun(t, kubectl, "kustomize", dir)
				var ds appsv1.DaemonSet
				var entry corev1.ConfigMap
				for _, doc := range strings.Split(out, "\n---\n") {
					switch {
					case strings.Contains(doc, "kind: DaemonSet"):
						if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
							t.Fatal(err)
						}
					case strings.Contains(doc, "kind: ConfigMap") && strings.Contains(doc, "name: netready-entry"):
						if err := yaml.Unmarshal([]byte(doc), &entry); err != nil {
							t.Fatal(err)
						}
					}
				}
				paths := map[string]string{}
				for _, v := range ds.Spec.Template.Spec.Volumes {
					if v.HostPath != nil {
						paths[v.Name] = v.HostPath.Path
					}
				}
				if paths["cni-conf"] != tc.conf || paths["cni-bin"] != tc.bin || paths["ipam"] != "/var/lib/cni/networks" {
					t.Errorf("host folders %v, want cni-conf %s, cni-bin %s and the pool's ipam", paths, tc.conf, tc.bin)
				}
				if tc.fragment != "" && !strings.Contains(entry.Data[tc.fragment], tc.conf) {
					t.Errorf("entry fragments %v lack %s naming %s", entry.Data, tc.fragment, tc.conf)
				}
				frags := t.TempDir()
				for name, data := range entry.Data {
					os.WriteFile(filepath.Join(frags, name), []byte(data), 0o644)
				}
				if code, out := cnitest.Installer(t, "--validate", frags); code != 0 {
					t.Errorf("--validate of the merged entry: exit %d\n%s", code, out)
				}
			})
		}
	}
}
