//go:build integration

// Package harness is the integration tests' environment: where the built
// binaries are (Main checks them and guards the host's forwarding
// sysctls), the repository's files, the release under test, and the small
// host tools every room uses (running commands, waiting, free ports,
// mounts, figures). Its subpackages run the components: cnitest (namespaces
// and the plugin), runtimes (containerd, CRI-O), kube (API server, node,
// sidecar, Helm, kustomize) and agents (OVN, Cilium). It holds no tests;
// the packages under test/integration do. Its functions take the test's
// testing.TB and clean up after it.
package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var (
	BinDir    string // netready binaries
	CNIBinDir string // reference plugins and cnitool
	// PluginPath holds both, as CNI_PATH.
	PluginPath string
)

// sysctls that bridge (isGateway) and ptp switch on; restored after the run.
var forwardingSysctls = []string{
	"/proc/sys/net/ipv4/ip_forward",
	"/proc/sys/net/ipv6/conf/all/forwarding",
	"/proc/sys/net/ipv6/conf/default/forwarding",
}

// Main checks the environment that `make test` sets (TEST_ENV: NETREADY_BIN,
// NETREADY_CNI_BIN and the other tool folders), saves the forwarding
// sysctls, runs the package's tests and restores them. Each test package
// calls it from its TestMain.
func Main(m *testing.M) int {
	BinDir, CNIBinDir = os.Getenv("NETREADY_BIN"), os.Getenv("NETREADY_CNI_BIN")
	if BinDir == "" || CNIBinDir == "" {
		fmt.Fprintln(os.Stderr, "integration: NETREADY_BIN and NETREADY_CNI_BIN must name the built binaries; run `make test`")
		return 1
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "integration: these tests need root (network namespaces, iptables)")
		return 1
	}
	for _, p := range []string{filepath.Join(BinDir, "netready"), filepath.Join(CNIBinDir, "bridge"), filepath.Join(CNIBinDir, "cnitool")} {
		if _, err := os.Stat(p); err != nil {
			fmt.Fprintf(os.Stderr, "integration: %v; run `make test`\n", err)
			return 1
		}
	}
	PluginPath = BinDir + ":" + CNIBinDir

	saved := map[string][]byte{}
	for _, p := range forwardingSysctls {
		if v, err := os.ReadFile(p); err == nil {
			saved[p] = v
		}
	}
	defer func() {
		for p, v := range saved {
			if err := os.WriteFile(p, v, 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "integration: cannot restore %s: %v\n", p, err)
			}
		}
	}()
	// cnitool caches results in /var/lib/cni; leave no trace if it was absent.
	if _, err := os.Stat("/var/lib/cni"); errors.Is(err, os.ErrNotExist) {
		defer os.RemoveAll("/var/lib/cni")
	}
	return m.Run()
}

// RepoPath names a file of the repository by its path from the repository's
// root (the folder with go.mod above the test's working folder), so that
// the harness finds it whichever package's test calls it.
func RepoPath(elem ...string) string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(append([]string{d}, elem...)...)
		}
		if filepath.Dir(d) == d {
			panic("harness: no go.mod above " + dir)
		}
	}
}
