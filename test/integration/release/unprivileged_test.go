//go:build integration

package release

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/test/harness"
)

// TestReleaseBuildsAsAnUnprivilegedUser runs `make release` the way an
// operator's release machine would: as nobody, in a copy of the tree's
// tracked files, with Go and the system's /usr/bin on PATH (no sbin, so
// none of the test tools `make deps` checks for), no module proxy, and a
// private HOME, so every tool the release builds lands in that user's own
// cache. Two read-only views only save time, and give nobody no right
// it would not have on its own machine: the module cache, bound read-only,
// and the build cache, an overlay whose writes land in the test's folder.
// Both are made in a mount namespace of the command's own, so they go when
// it exits.
func TestReleaseBuildsAsAnUnprivilegedUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to set up the user's views and switch to nobody")
	}
	const version = "v0.0.1"
	dir, err := os.MkdirTemp("", "netready-release-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// MkdirTemp makes it 0700: nobody must reach its own folders inside.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, home := filepath.Join(dir, "src"), filepath.Join(dir, "home")
	for _, d := range []string{src, home, "gocache", "gomodcache", "ovl/upper", "ovl/work"} {
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The work tree's tracked files, as a release checkout would have
	// them (a file deleted but not yet committed is skipped).
	copyTree := exec.Command("bash", "-c",
		`git -C "$0" ls-files -z | tar -C "$0" --null --ignore-failed-read -T - -cf - | tar -C "$1" -xf - && chown -R nobody:nogroup "$1" "$2"`,
		harness.RepoPath(), src, home)
	if out, err := copyTree.CombinedOutput(); err != nil {
		t.Fatalf("copying the tree: %v\n%s", err, out)
	}

	goEnv := func(key string) string {
		out, err := exec.Command("go", "env", key).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", key, err)
		}
		return strings.TrimSpace(string(out))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	script := `set -e
mount --bind "$GOMODCACHE_HOST" "$DIR/gomodcache" && mount -o remount,bind,ro "$DIR/gomodcache"
mount -t overlay overlay -o "lowerdir=$GOCACHE_HOST,upperdir=$DIR/ovl/upper,workdir=$DIR/ovl/work" "$DIR/gocache"
# The cache's folders become nobody's in the overlay only (a copy-up of
# the folder, not of its files), so new entries can be written.
chown nobody:nogroup "$DIR/gocache" "$DIR"/gocache/*/
exec setpriv --reuid=nobody --regid=nogroup --clear-groups env -i \
  HOME="$DIR/home" PATH="$GOROOT_HOST/bin:/usr/bin:/bin" LANG=C \
  GOCACHE="$DIR/gocache" GOMODCACHE="$DIR/gomodcache" GOPATH="$DIR/home/go" \
  GOPROXY=off GOTOOLCHAIN=local \
  make -C "$DIR/src" release VERSION="$VERSION"`
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "bash", "-c", script)
	cmd.Env = append(os.Environ(), "DIR="+dir, "VERSION="+version,
		"GOMODCACHE_HOST="+goEnv("GOMODCACHE"), "GOCACHE_HOST="+goEnv("GOCACHE"), "GOROOT_HOST="+goEnv("GOROOT"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("make release as nobody: %v\n%s", err, tail(out.String(), 40))
	}
	t.Logf("make release as nobody took %s", time.Since(start).Round(time.Second))

	dist := filepath.Join(src, "dist")
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if diff := cmp.Diff(wantArtefacts(version), got); diff != "" {
		t.Errorf("dist/ (-want +got):\n%s", diff)
	}
	verifySums(t, dist, got)
}

// wantArtefacts is every file of a release, as the contract lists them
// (v0.3 "Release", v0.5 "Helm"), sorted.
func wantArtefacts(version string) []string {
	want := []string{"SHA256SUMS", "netready-image.tar", "netready.yaml",
		"netready-" + version + "-deploy.tar.gz", "netready-" + version + ".tgz"}
	for _, arch := range []string{"amd64", "arm64"} {
		want = append(want, "netready-"+version+"-linux-"+arch+".tar.gz")
		for _, b := range releaseBinaries {
			want = append(want, b+"-"+version+"-linux-"+arch+".cdx.json")
		}
	}
	for _, p := range []string{"linux-amd64", "linux-arm64", "darwin-amd64", "darwin-arm64", "windows-amd64"} {
		for _, b := range []string{"kubectl-netready", "netready-install"} {
			want = append(want, b+"-"+version+"-"+p+".tar.gz")
			if !strings.HasPrefix(p, "linux-") {
				want = append(want, b+"-"+version+"-"+p+".cdx.json")
			}
		}
	}
	slices.Sort(want)
	return slices.Compact(want)
}

// verifySums checks that SHA256SUMS lists exactly files, but itself, each
// with its sha256.
func verifySums(t *testing.T, dist string, files []string) {
	t.Helper()
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not `<sum>  <file>`", line)
		}
		data, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Errorf("SHA256SUMS lists %s: %v", name, err)
			continue
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s: sha256 %x, SHA256SUMS says %s", name, got, sum)
		}
		listed = append(listed, name)
	}
	want := slices.DeleteFunc(slices.Clone(files), func(f string) bool { return f == "SHA256SUMS" })
	slices.Sort(listed)
	if diff := cmp.Diff(want, listed); diff != "" {
		t.Errorf("SHA256SUMS lists (-files in dist +listed):\n%s", diff)
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
