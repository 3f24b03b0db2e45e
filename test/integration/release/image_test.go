//go:build integration

package release

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestImageHoldsWhatTheDaemonSetNeeds unpacks the archive `make image` wrote and checks what the
// DaemonSet relies on: the image's name, PATH, the three static binaries,
// and an iptables (nf_tables backend) that works from the image's own
// filesystem alone, so that the sidecar can re-check pending iptables
// checks. TestQuickStartWorksOnARealNode runs the same image under containerd.
func TestImageHoldsWhatTheDaemonSetNeeds(t *testing.T) {
	archive := os.Getenv("NETREADY_IMAGE")
	dir := t.TempDir()
	harness.MustRun(t, "tar", "-xf", archive, "-C", dir)
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	readJSON(t, filepath.Join(dir, "index.json"), &index)
	if len(index.Manifests) != 1 || !strings.HasPrefix(index.Manifests[0].Annotations["io.containerd.image.name"], "ghcr.io/netready/netready:") {
		t.Fatalf("index.json = %+v, want one manifest named ghcr.io/netready/netready:<version>", index)
	}
	blob := func(digest string) string {
		return filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
	}
	var manifest struct {
		Config struct{ Digest string }   `json:"config"`
		Layers []struct{ Digest string } `json:"layers"`
	}
	readJSON(t, blob(index.Manifests[0].Digest), &manifest)
	var config struct {
		Config struct{ Env []string } `json:"config"`
	}
	readJSON(t, blob(manifest.Config.Digest), &config)
	if !strings.Contains(strings.Join(config.Config.Env, " "), "PATH=/usr/sbin") {
		t.Errorf("image Env = %v, want a PATH with /usr/sbin", config.Config.Env)
	}
	rootfs := filepath.Join(dir, "rootfs")
	os.MkdirAll(rootfs, 0o755)
	for _, l := range manifest.Layers {
		harness.MustRun(t, "tar", "-xf", blob(l.Digest), "-C", rootfs)
	}
	for _, b := range []string{"netready", "netready-install", "netready-sidecar"} {
		out := harness.MustRun(t, "file", "-L", filepath.Join(rootfs, "bin", b))
		if !strings.Contains(out, "statically linked") {
			t.Errorf("/bin/%s is not static: %s", b, out)
		}
	}
	chain := "NR-" + harness.RandomHex(3)
	cnitest.IPTablesChain(t, chain)
	harness.MustRun(t, "iptables", "-w", "5", "-A", chain, "-s", "10.200.1.5/32", "-m", "comment", "--comment", "pod default/web-1", "-j", "ACCEPT")
	out, err := exec.Command("chroot", rootfs, "/usr/sbin/iptables", "-w", "5", "-S", chain).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `-s 10.200.1.5/32 -m comment --comment "pod default/web-1" -j ACCEPT`) {
		t.Errorf("the image's iptables -S = %v\n%s", err, out)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
