//go:build integration

package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/netready/netready/test/harness"
)

// releaseArches are the platforms of a release.
var releaseArches = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// releaseBinaries are in each architecture's archive; the image holds
// all but the kubectl plugin, which runs on an operator's machine.
var (
	releaseBinaries = []string{"kubectl-netready", "netready", "netready-install", "netready-sidecar"}
	imageBinaries   = []string{"netready", "netready-install", "netready-sidecar"}
)

// TestReleaseArtefactsAreComplete checks every artefact of the release: checksums, static
// binaries of each architecture stamped with the version, an SBOM per
// binary, the OCI image index with both platforms, and deploy/ pinned to
// the version.
func TestReleaseArtefactsAreComplete(t *testing.T) {
	dist, version := harness.ReleaseDir(t)

	t.Run("SHA256SUMS covers every file", func(t *testing.T) {
		sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
			sum, name, ok := strings.Cut(line, "  ")
			if !ok {
				t.Fatalf("SHA256SUMS line %q is not `<sum>  <file>`", line)
			}
			data, err := os.ReadFile(filepath.Join(dist, name))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
				t.Errorf("%s: sha256 %x, SHA256SUMS says %s", name, got, sum)
			}
			listed[name] = true
		}
		entries, _ := os.ReadDir(dist)
		for _, e := range entries {
			if e.Name() != "SHA256SUMS" && !listed[e.Name()] {
				t.Errorf("%s is not in SHA256SUMS", e.Name())
			}
		}
	})

	for arch, machine := range releaseArches {
		t.Run("binaries "+arch, func(t *testing.T) {
			files := untarGz(t, filepath.Join(dist, fmt.Sprintf("netready-%s-linux-%s.tar.gz", version, arch)))
			if diff := slices.Compare(sortedKeys(files), releaseBinaries); diff != 0 {
				t.Fatalf("archive holds %v, want %v", sortedKeys(files), releaseBinaries)
			}
			for _, b := range releaseBinaries {
				checkStaticBinary(t, b, files[b], machine, version)
			}
			if arch != runtime.GOARCH {
				return
			}
			dir := t.TempDir()
			for _, b := range releaseBinaries {
				os.WriteFile(filepath.Join(dir, b), files[b], 0o755)
			}
			for _, b := range []string{"netready-install", "netready-sidecar", "kubectl-netready"} {
				if out := harness.MustRun(t, filepath.Join(dir, b), "--version"); strings.TrimSpace(out) != b+" "+version {
					t.Errorf("%s --version = %q, want %q", b, out, b+" "+version)
				}
			}
			// With no CNI_COMMAND, a skel plugin prints its about string.
			out, _ := exec.Command(filepath.Join(dir, "netready")).CombinedOutput()
			if !strings.Contains(string(out), "CNI netready plugin "+version) {
				t.Errorf("netready without CNI_COMMAND says %q, want the version %s", out, version)
			}
		})
		for _, b := range releaseBinaries {
			t.Run("SBOM "+b+" "+arch, func(t *testing.T) {
				var bom struct {
					BOMFormat string `json:"bomFormat"`
					Metadata  struct {
						Component struct{ Name, Version, Purl string } `json:"component"`
					} `json:"metadata"`
					Components []struct{ Name, Version string } `json:"components"`
				}
				readJSON(t, filepath.Join(dist, fmt.Sprintf("%s-%s-linux-%s.cdx.json", b, version, arch)), &bom)
				c := bom.Metadata.Component
				if bom.BOMFormat != "CycloneDX" || c.Name != "github.com/netready/netready" || c.Version != version {
					t.Errorf("SBOM format %q, component %+v; want CycloneDX for github.com/netready/netready %s", bom.BOMFormat, c, version)
				}
				if !strings.Contains(c.Purl, "goarch="+arch) {
					t.Errorf("SBOM purl %q does not name goarch=%s", c.Purl, arch)
				}
				if !slices.ContainsFunc(bom.Components, func(m struct{ Name, Version string }) bool {
					return m.Name == "github.com/containernetworking/cni" && m.Version != ""
				}) {
					t.Errorf("SBOM lists no github.com/containernetworking/cni among %d components", len(bom.Components))
				}
			})
		}
	}

	t.Run("image index", func(t *testing.T) { checkImageIndex(t, dist, version) })

	t.Run("deploy pinned", func(t *testing.T) {
		dir := t.TempDir()
		harness.MustRun(t, "tar", "-xzf", filepath.Join(dist, fmt.Sprintf("netready-%s-deploy.tar.gz", version)), "-C", dir)
		out := harness.MustRun(t, filepath.Join(os.Getenv("NETREADY_K8S_BIN"), "kubectl"), "kustomize", filepath.Join(dir, "deploy"))
		want := "image: ghcr.io/netready/netready:" + version
		if strings.Count(out, want) != 2 || strings.Contains(out, ":dev") {
			t.Errorf("kubectl kustomize deploy/ from the release: want both containers on %q and no :dev\n%s", want, out)
		}
	})
}

// checkStaticBinary: an ELF for machine, without an interpreter, with the
// version stamped in (the one check that works for a foreign arch).
func checkStaticBinary(t *testing.T, name string, data []byte, machine elf.Machine, version string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: not an ELF file: %v", name, err)
		return
	}
	if f.Machine != machine {
		t.Errorf("%s: machine %v, want %v", name, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has an interpreter: not static", name)
		}
	}
	if !bytes.Contains(data, []byte(version)) {
		t.Errorf("%s: the version %s is not stamped in", name, version)
	}
}

// checkImageIndex: the archive is an OCI layout whose one entry, named
// ghcr.io/netready/netready:<version>, is an image index with a manifest
// per platform; each manifest's config names its architecture and its
// layer carries that architecture's binaries and a PATH to iptables.
func checkImageIndex(t *testing.T, dist, version string) {
	dir := t.TempDir()
	harness.MustRun(t, "tar", "-xf", filepath.Join(dist, "netready-image.tar"), "-C", dir)
	blob := func(digest string) string {
		return filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
	}
	type descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Annotations map[string]string `json:"annotations"`
		Platform    struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
		} `json:"platform"`
	}
	verified := func(digest string) {
		data, err := os.ReadFile(blob(digest))
		if err != nil {
			t.Fatalf("blob %s: %v", digest, err)
		}
		if got := sha256.Sum256(data); "sha256:"+hex.EncodeToString(got[:]) != digest {
			t.Errorf("blob %s holds content of digest %x", digest, got)
		}
	}
	var layout struct{ Manifests []descriptor }
	readJSON(t, filepath.Join(dir, "index.json"), &layout)
	if len(layout.Manifests) != 1 || layout.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" ||
		layout.Manifests[0].Annotations["io.containerd.image.name"] != "ghcr.io/netready/netready:"+version ||
		layout.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("index.json = %+v, want one image index named ghcr.io/netready/netready:%s", layout.Manifests, version)
	}
	verified(layout.Manifests[0].Digest)
	var index struct{ Manifests []descriptor }
	readJSON(t, blob(layout.Manifests[0].Digest), &index)
	var platforms []string
	for _, m := range index.Manifests {
		arch := m.Platform.Architecture
		platforms = append(platforms, m.Platform.OS+"/"+arch)
		verified(m.Digest)
		var manifest struct {
			Config struct{ Digest string }   `json:"config"`
			Layers []struct{ Digest string } `json:"layers"`
		}
		readJSON(t, blob(m.Digest), &manifest)
		verified(manifest.Config.Digest)
		var config struct {
			Architecture string                             `json:"architecture"`
			OS           string                             `json:"os"`
			Config       struct{ Env, Entrypoint []string } `json:"config"`
		}
		readJSON(t, blob(manifest.Config.Digest), &config)
		if config.Architecture != arch || config.OS != "linux" {
			t.Errorf("%s: config says %s/%s", arch, config.OS, config.Architecture)
		}
		if !strings.Contains(strings.Join(config.Config.Env, " "), "PATH=/usr/sbin") {
			t.Errorf("%s: Env = %v, want a PATH with /usr/sbin", arch, config.Config.Env)
		}
		files := map[string][]byte{}
		for _, l := range manifest.Layers {
			verified(l.Digest)
			for name, data := range untar(t, blob(l.Digest), false) {
				files[name] = data
			}
		}
		for _, b := range imageBinaries {
			checkStaticBinary(t, arch+" image /bin/"+b, files["bin/"+b], releaseArches[arch], version)
		}
		if _, ok := files["usr/sbin/xtables-nft-multi"]; !ok {
			t.Errorf("%s image: no usr/sbin/xtables-nft-multi (iptables for the sidecar's re-checks)", arch)
		}
	}
	slices.Sort(platforms)
	if diff := slices.Compare(platforms, []string{"linux/amd64", "linux/arm64"}); diff != 0 {
		t.Errorf("index platforms = %v, want linux/amd64 and linux/arm64", platforms)
	}
}

func untarGz(t *testing.T, path string) map[string][]byte { return untar(t, path, true) }

// untar returns the regular files of a (gzipped) tar file by name.
func untar(t *testing.T, path string, gzipped bool) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if gzipped {
		if r, err = gzip.NewReader(f); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return readTar(t, path, r)
}

// readTar returns the regular files of a tar stream by cleaned name.
func readTar(t *testing.T, path string, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			data, _ := io.ReadAll(tr)
			files[strings.TrimPrefix(filepath.Clean(h.Name), "./")] = data
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
