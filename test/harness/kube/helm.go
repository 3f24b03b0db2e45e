//go:build integration

package kube

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// HelmCmd runs the real helm, with its own config and cache folders and,
// when kubeconfig is set, against that cluster.
func HelmCmd(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("NETREADY_HELM")
	if bin == "" {
		t.Fatal("NETREADY_HELM must name the helm binary scripts/build-helm.sh builds; run `make test`")
	}
	home := filepath.Join(os.TempDir(), "netready-helm-home")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	if kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+kubeconfig)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// MustHelm is HelmCmd that fails the test if helm fails.
func MustHelm(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := HelmCmd(t, kubeconfig, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
