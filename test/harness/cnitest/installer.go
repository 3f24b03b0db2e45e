//go:build integration

package cnitest

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/netready/netready/test/harness"
)

// RunInstaller runs the real netready-install with args, bounded to 30 s,
// and fails the test if it fails.
func RunInstaller(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(harness.BinDir, "netready-install"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("netready-install %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// Installer runs the real netready-install and returns its exit code and
// output.
func Installer(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(harness.BinDir, "netready-install"), args...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("netready-install %v: %v", args, err)
	return 0, ""
}
