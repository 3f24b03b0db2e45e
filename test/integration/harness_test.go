//go:build integration

// Package integration drives the real netready binary through the real CNI
// reference plugins, cnitool and libcni, in network namespaces made for
// each test. It needs root and the binaries that `make test` builds.
package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/marker"
)

var (
	binDir    string // netready binaries
	cniBinDir string // reference plugins and cnitool
	// pluginPath holds both, as CNI_PATH.
	pluginPath string
)

// sysctls that bridge (isGateway) and ptp switch on; restored after the run.
var forwardingSysctls = []string{
	"/proc/sys/net/ipv4/ip_forward",
	"/proc/sys/net/ipv6/conf/all/forwarding",
	"/proc/sys/net/ipv6/conf/default/forwarding",
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	binDir, cniBinDir = os.Getenv("NETREADY_BIN"), os.Getenv("NETREADY_CNI_BIN")
	if binDir == "" || cniBinDir == "" {
		fmt.Fprintln(os.Stderr, "integration: NETREADY_BIN and NETREADY_CNI_BIN must name the built binaries; run `make test`")
		return 1
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "integration: these tests need root (network namespaces, iptables)")
		return 1
	}
	for _, p := range []string{filepath.Join(binDir, "netready"), filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "cnitool")} {
		if _, err := os.Stat(p); err != nil {
			fmt.Fprintf(os.Stderr, "integration: %v; run `make test`\n", err)
			return 1
		}
	}
	pluginPath = binDir + ":" + cniBinDir

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

// testNet is one test's network: a conflist from conflists/ with names,
// subnets and folders made unique to the test.
type testNet struct {
	t        testing.TB
	Name     string
	ConfDir  string
	StateDir string
	LogFile  string
	Bridge   string
	Subnet   string // 10.200.N.0/24
	Prefix   string // 10.200.N.
	Subnet6  string
	Cache    string // libcni cache folder
	IPAMDir  string // host-local's folder for this network
	ID       string // unique per test, for names
	List     map[string]any
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newNet loads conflists/<file>, makes it unique, lets edit change it, writes
// it and arms the network safety rules: no forwarding out of the subnet.
func newNet(t testing.TB, file string, edit func(n *testNet, list map[string]any)) *testNet {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "conflists", file))
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	id := randomHex(3)
	third := 100 + int(hexByte(id))%150
	n := &testNet{
		t: t, Name: "nr-" + id, ConfDir: t.TempDir(), StateDir: t.TempDir(),
		Bridge: "nr" + id, Cache: t.TempDir(),
		Subnet: fmt.Sprintf("10.200.%d.0/24", third), Prefix: fmt.Sprintf("10.200.%d.", third),
		Subnet6: fmt.Sprintf("fd00:10:200:%d::/64", third),
		List:    list,
	}
	n.LogFile = filepath.Join(n.StateDir, "netready.log")
	n.ID = id
	list["name"] = n.Name
	ipamDir := t.TempDir()
	n.IPAMDir = filepath.Join(ipamDir, n.Name)
	for _, p := range plugins(list) {
		switch p["type"] {
		case "bridge":
			p["bridge"] = n.Bridge
		case "netready":
			p["stateDir"] = n.StateDir
			p["logFile"] = n.LogFile
		}
		if ipam, ok := p["ipam"].(map[string]any); ok && ipam["ranges"] != nil {
			ipam["dataDir"] = ipamDir
			var ranges []any
			for _, r := range ipam["ranges"].([]any) {
				sub := r.([]any)[0].(map[string]any)["subnet"].(string)
				s := n.Subnet
				if strings.Contains(sub, ":") {
					s = n.Subnet6
				}
				ranges = append(ranges, []any{map[string]any{"subnet": s}})
			}
			ipam["ranges"] = ranges
		}
	}
	if edit != nil {
		edit(n, list)
	}
	n.write()
	guardForwarding(t, n.Subnet)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "link", "del", n.Bridge).CombinedOutput(); err != nil &&
			!strings.Contains(string(out), "Cannot find device") {
			t.Logf("cleanup: ip link del %s: %v %s", n.Bridge, err, out)
		}
		if t.Failed() {
			if log, err := os.ReadFile(n.LogFile); err == nil {
				t.Logf("netready log:\n%s", log)
			}
		}
	})
	return n
}

func hexByte(s string) byte {
	b, _ := hex.DecodeString(s[:2])
	return b[0]
}

func plugins(list map[string]any) []map[string]any {
	var out []map[string]any
	for _, p := range list["plugins"].([]any) {
		out = append(out, p.(map[string]any))
	}
	return out
}

// Netready returns the netready entry of the conflist.
func (n *testNet) Netready() map[string]any {
	for _, p := range plugins(n.List) {
		if p["type"] == "netready" {
			return p
		}
	}
	n.t.Fatal("conflist has no netready entry")
	return nil
}

func (n *testNet) write() {
	data, _ := json.MarshalIndent(n.List, "", "  ")
	// Atomically: a runtime that reads a half-written file takes the
	// node's network down.
	if err := atomicfile.Write(filepath.Join(n.ConfDir, n.Name+".conflist"), data, 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// guardForwarding drops anything forwarded from the test subnet to outside
// it, before any pod exists (TESTBED network safety).
func guardForwarding(t testing.TB, subnet string) {
	t.Helper()
	rule := []string{"FORWARD", "-s", subnet, "!", "-d", subnet, "-j", "DROP"}
	if out, err := exec.Command("iptables", append([]string{"-w", "5", "-I"}, rule...)...).CombinedOutput(); err != nil {
		t.Fatalf("iptables guard: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("iptables", append([]string{"-w", "5", "-D"}, rule...)...).CombinedOutput(); err != nil {
			t.Errorf("removing iptables guard: %v %s", err, out)
		}
	})
}

// newNS makes a pod netns that the test removes.
func newNS(t testing.TB) ns.NetNS {
	t.Helper()
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		netns.Close()
		if err := unmountNS(netns); err != nil {
			t.Errorf("unmount netns: %v", err)
		}
	})
	return netns
}

// unmountNS removes a test netns. A plugin killed inside it can keep the
// mount busy for a moment while its threads exit, so EBUSY is retried.
func unmountNS(netns ns.NetNS) error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = testutils.UnmountNS(netns); err == nil || !strings.Contains(err.Error(), "busy") {
			return err
		}
	}
	return err
}

// cnitool runs the real cnitool; extra are KEY=VALUE settings.
func (n *testNet) cnitool(verb, nsPath string, extra ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(cniBinDir, "cnitool"), verb, n.Name, nsPath)
	cmd.Env = append(os.Environ(), "NETCONFPATH="+n.ConfDir, "CNI_PATH="+pluginPath)
	cmd.Env = append(cmd.Env, extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("cnitool %s: %v: %s%s", verb, err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// add runs cnitool add and arranges a DEL at cleanup, so nothing leaks
// when the test fails half-way.
func (n *testNet) add(nsPath string, extra ...string) (string, error) {
	n.t.Cleanup(func() { n.cnitool("del", nsPath, extra...) })
	return n.cnitool("add", nsPath, extra...)
}

// containerID is the ID cnitool gives a netns path.
func containerID(nsPath string) string {
	s := sha512.Sum512([]byte(nsPath))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

func (n *testNet) markerPath(cid, ifName string) string {
	return filepath.Join(n.StateDir, n.Name, cid+"_"+ifName+".json")
}

func (n *testNet) readMarker(cid, ifName string) *marker.Marker {
	n.t.Helper()
	m, err := marker.ReadFile(n.markerPath(cid, ifName))
	if err != nil {
		n.t.Fatalf("marker: %v", err)
	}
	return m
}

// libcni gives the CNI error codes that cnitool does not print.
func (n *testNet) libcni() (*libcni.CNIConfig, *libcni.NetworkConfigList) {
	n.t.Helper()
	data, _ := json.Marshal(n.List)
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		n.t.Fatal(err)
	}
	return libcni.NewCNIConfigWithCacheDir(strings.Split(pluginPath, ":"), n.Cache, nil), list
}

// cniCode returns the code of a CNI error, or 0.
func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// invoke runs the netready binary directly, as a runtime would.
func invoke(t testing.TB, command string, stdin []byte, env ...string) (string, *types.Error) {
	t.Helper()
	return invokeBin(t, filepath.Join(binDir, "netready"), command, stdin, env...)
}

// invokeBin is invoke with another copy of the plugin.
func invokeBin(t testing.TB, bin, command string, stdin []byte, env ...string) (string, *types.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append([]string{"CNI_COMMAND=" + command, "CNI_PATH=" + pluginPath, "PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	var e types.Error
	if jerr := json.Unmarshal(stdout.Bytes(), &e); jerr != nil {
		t.Fatalf("netready %s failed (%v) without a CNI error on stdout: %q", command, err, stdout.String())
	}
	return stdout.String(), &e
}

// run runs a command and fails the test if it fails.
func mustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// applyNFT runs an nft script as one transaction.
func applyNFT(script string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		if len(script) > 200 {
			script = script[:200] + "…"
		}
		return fmt.Errorf("nft %q: %v: %s", script, err, out)
	}
	return nil
}

// nsName is the name `ip -n` knows a test netns by.
func nsName(netns ns.NetNS) string {
	return filepath.Base(netns.Path())
}

// pluginConf is the netready entry as libcni hands it to the plugin, with
// prevResult (a JSON object) if given.
func (n *testNet) pluginConf(prevResult []byte) []byte {
	n.t.Helper()
	conf := map[string]any{"cniVersion": n.List["cniVersion"], "name": n.Name}
	for k, v := range n.Netready() {
		conf[k] = v
	}
	if prevResult != nil {
		conf["prevResult"] = json.RawMessage(prevResult)
	}
	data, err := json.Marshal(conf)
	if err != nil {
		n.t.Fatal(err)
	}
	return data
}

// shipWithoutNetready rewrites the conflist as a network plugin would ship
// it, without netready, and returns the netready entry it took out.
func (n *testNet) shipWithoutNetready() []byte {
	entry, _ := json.Marshal(n.Netready())
	var chain []any
	for _, p := range plugins(n.List) {
		if p["type"] != "netready" {
			chain = append(chain, p)
		}
	}
	n.List["plugins"] = chain
	n.write()
	return entry
}

// pluginDir is a runtime's CNI bin folder holding copies of the named
// reference plugins, for the installer to add netready to.
func pluginDir(t testing.TB, names ...string) string {
	t.Helper()
	bin := t.TempDir()
	for _, p := range names {
		data, err := os.ReadFile(filepath.Join(cniBinDir, p))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, p), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}
