//go:build integration

package plugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/netready/netready/test/harness"
)

// TestPluginStartsLean: bin/netready takes its one P in the first package
// init, before the packages whose inits cost every call (os, unicode's
// tables, go-iptables' and the CNI library's regular expressions,
// nftables), which then run beside no second runtime thread; and the
// runtime does not re-read the cgroup's CPU limit to undo it. A
// GOMAXPROCS(1) back in main, or an oneproc import path that sorts after
// those packages, fails it.
func TestPluginStartsLean(t *testing.T) {
	bin := filepath.Join(harness.BinDir, "netready")
	info, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, info)
	}
	if !strings.Contains(string(info), "updatemaxprocs=0") {
		t.Errorf("bin/netready is not built with //go:debug updatemaxprocs=0:\n%s", info)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CNI_COMMAND=VERSION", "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("VERSION: %v\n%s", err, out)
	}
	var inits []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "init" {
			inits = append(inits, f[1])
		}
	}
	const oneproc = "github.com/netready/netready/plugins/meta/netready/internal/oneproc"
	at := slices.Index(inits, oneproc)
	if at < 0 {
		t.Fatalf("bin/netready does not run %s's init; inits:\n%s", oneproc, strings.Join(inits, "\n"))
	}
	for _, later := range []string{"os", "unicode", "github.com/containernetworking/cni/pkg/utils",
		"github.com/coreos/go-iptables/iptables", "github.com/google/nftables"} {
		if i := slices.Index(inits, later); i >= 0 && i < at {
			t.Errorf("%s's init runs before %s's", later, oneproc)
		}
	}
}
