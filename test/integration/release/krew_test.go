//go:build integration

package release

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/netready/netready/test/harness"
)

// krewCommand is the krew line the docs give an operator, in backquotes.
var krewCommand = regexp.MustCompile("`kubectl krew install ([^`]*)`")

// TestKrewInstallsThePluginAsTheDocsSay runs the `kubectl krew install`
// line of README.md and of the chart's NOTES.txt, for this machine's
// platform, with real krew on the release's files, in a network
// namespace of its own: the manifest's URLs are where the release is
// published, so the command must work from the files the operator has.
func TestKrewInstallsThePluginAsTheDocsSay(t *testing.T) {
	dist, version := harness.ReleaseDir(t)
	krew := buildKrew(t)
	platform := runtime.GOOS + "-" + runtime.GOARCH
	for _, doc := range []string{"README.md", "charts/netready/templates/NOTES.txt"} {
		t.Run(doc, func(t *testing.T) {
			text, err := os.ReadFile(harness.RepoPath(doc))
			if err != nil {
				t.Fatal(err)
			}
			m := krewCommand.FindSubmatch(bytes.ReplaceAll(text, []byte("\n"), []byte(" ")))
			if m == nil {
				t.Fatalf("%s gives no `kubectl krew install …` command", doc)
			}
			line := strings.NewReplacer("$VERSION", version, "linux-amd64", platform).Replace(string(m[1]))
			args := append([]string{"--net", krew, "install"}, strings.Fields(line)...)
			root := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "unshare", args...)
			cmd.Dir = dist
			cmd.Env = append(os.Environ(), "KREW_ROOT="+filepath.Join(root, "krew"), "HOME="+root, "KREW_NO_UPGRADE_CHECK=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s's `kubectl krew install %s` (here: krew install %s): %v\n%s", doc, m[1], line, err, out)
			}
			out, err := exec.Command(filepath.Join(root, "krew", "bin", "kubectl-netready"), "--version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), version) {
				t.Fatalf("installed kubectl-netready --version: %v, %q; want %s", err, out, version)
			}
		})
	}
}

// buildKrew builds krew, pinned by test/krew-tools, once per cache key.
func buildKrew(t *testing.T) string {
	t.Helper()
	dir := filepath.Dir(os.Getenv("NETREADY_KREW"))
	if os.Getenv("NETREADY_KREW") == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(home, ".cache", "netready", "krew")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, harness.RepoPath("scripts", "build-krew.sh"), dir).CombinedOutput(); err != nil {
		t.Fatalf("scripts/build-krew.sh: %v\n%s", err, out)
	}
	return filepath.Join(dir, "krew")
}
