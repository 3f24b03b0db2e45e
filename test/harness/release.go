//go:build integration

package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// ReleaseDir is what `make test` built with scripts/release.sh, as
// `make release` does, and the version it stamped.
func ReleaseDir(t testing.TB) (dir, version string) {
	t.Helper()
	dir, version = os.Getenv("NETREADY_DIST"), os.Getenv("NETREADY_VERSION")
	if _, err := os.Stat(filepath.Join(dir, "SHA256SUMS")); err != nil || version == "" {
		t.Fatalf("NETREADY_DIST (%q) and NETREADY_VERSION (%q): %v; run `make test`, which builds the release", dir, version, err)
	}
	return dir, version
}
