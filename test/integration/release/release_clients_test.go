//go:build integration

package release

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/netready/netready/test/harness"
)

// clientPlatforms are the platforms of the operator's tools.
var clientPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"}

// TestReleaseCarriesClientsForEveryPlatform: the release carries kubectl-netready and
// netready-install for every platform an operator runs them on, each
// archive with its binary (of the right format and architecture, the
// version stamped in) and LICENSE, an SBOM for each non-Linux binary, and
// a krew manifest whose every platform points at one of those archives
// with its sha256.
func TestReleaseCarriesClientsForEveryPlatform(t *testing.T) {
	dist, version := harness.ReleaseDir(t)
	for _, p := range clientPlatforms {
		goos, arch, _ := strings.Cut(p, "/")
		for _, tool := range []string{"kubectl-netready", "netready-install"} {
			t.Run(tool+" "+p, func(t *testing.T) {
				name := tool
				if goos == "windows" {
					name += ".exe"
				}
				files := untarGz(t, filepath.Join(dist, fmt.Sprintf("%s-%s-%s-%s.tar.gz", tool, version, goos, arch)))
				if got, want := sortedKeys(files), []string{"LICENSE", name}; !slices.Equal(got, want) {
					t.Fatalf("archive holds %v, want %v", got, want)
				}
				checkClientBinary(t, goos, arch, files[name])
				if !bytes.Contains(files[name], []byte(version)) {
					t.Errorf("%s does not carry the version %s", name, version)
				}
				if goos != "linux" {
					var bom struct {
						BOMFormat string `json:"bomFormat"`
						Metadata  struct {
							Component struct{ Version, Purl string } `json:"component"`
						} `json:"metadata"`
					}
					readJSON(t, filepath.Join(dist, fmt.Sprintf("%s-%s-%s-%s.cdx.json", tool, version, goos, arch)), &bom)
					if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Version != version || !strings.Contains(bom.Metadata.Component.Purl, "goos="+goos) {
						t.Errorf("SBOM %+v, want CycloneDX of %s for goos=%s", bom, version, goos)
					}
				}
			})
		}
	}

	t.Run("krew manifest", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(dist, "netready.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct{ Name string }
			Spec       struct {
				Version          string `json:"version"`
				ShortDescription string `json:"shortDescription"`
				Description      string `json:"description"`
				Homepage         string `json:"homepage"`
				Platforms        []struct {
					Selector struct {
						MatchLabels map[string]string `json:"matchLabels"`
					} `json:"selector"`
					URI    string `json:"uri"`
					SHA256 string `json:"sha256"`
					Bin    string `json:"bin"`
					Files  []struct{ From, To string }
				} `json:"platforms"`
			} `json:"spec"`
		}
		if err := yaml.UnmarshalStrict(data, &m); err != nil {
			t.Fatalf("netready.yaml: %v\n%s", err, data)
		}
		if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "netready" ||
			m.Spec.Version != version || m.Spec.ShortDescription == "" {
			t.Errorf("manifest header: %s %s %q version %q", m.APIVersion, m.Kind, m.Metadata.Name, m.Spec.Version)
		}
		var seen []string
		for _, pl := range m.Spec.Platforms {
			goos, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
			seen = append(seen, goos+"/"+arch)
			archive := fmt.Sprintf("kubectl-netready-%s-%s-%s.tar.gz", version, goos, arch)
			if pl.URI != "https://github.com/netready/netready/releases/download/"+version+"/"+archive {
				t.Errorf("%s/%s: uri %q does not name %s", goos, arch, pl.URI, archive)
			}
			raw, err := os.ReadFile(filepath.Join(dist, archive))
			if err != nil {
				t.Errorf("%s/%s: %v", goos, arch, err)
				continue
			}
			sum := sha256.Sum256(raw)
			if pl.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("%s/%s: sha256 %s, the archive's is %x", goos, arch, pl.SHA256, sum)
			}
			bin := "kubectl-netready"
			if goos == "windows" {
				bin += ".exe"
			}
			if pl.Bin != bin || len(pl.Files) != 2 || pl.Files[0].From != bin || pl.Files[1].From != "LICENSE" {
				t.Errorf("%s/%s: bin %q, files %+v; want %s and LICENSE", goos, arch, pl.Bin, pl.Files, bin)
			}
		}
		if !slices.Equal(seen, clientPlatforms) {
			t.Errorf("manifest platforms %v, want %v", seen, clientPlatforms)
		}
	})
}

// checkClientBinary: the executable format and machine of goos/arch.
func checkClientBinary(t *testing.T, goos, arch string, data []byte) {
	t.Helper()
	r := bytes.NewReader(data)
	switch goos {
	case "linux":
		f, err := elf.NewFile(r)
		if err != nil || f.Machine != releaseArches[arch] {
			t.Errorf("not an ELF for %s: %v", arch, err)
		}
	case "darwin":
		f, err := macho.NewFile(r)
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[arch]
		if err != nil || f.Cpu != want {
			t.Errorf("not a Mach-O for %s: %v", arch, err)
		}
	case "windows":
		f, err := pe.NewFile(r)
		if err != nil || f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 {
			t.Errorf("not a PE for amd64: %v", err)
		}
	}
}
