//go:build integration

// Package cnitest runs the plugin as a container runtime does: it makes
// network namespaces and test networks from the repository's conflists,
// calls the plugin through cnitool, libcni or a direct exec, and runs the
// reference plugins, the test agent (test/cmd/agent) and the installer that
// writes netready into a runtime's CNI folders.
package cnitest

import (
	"bytes"
	"context"
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
	"github.com/netready/netready/test/harness"
)

// NetreadyLog is the plugin's log from offset on, and its length.
func (n *TestNet) NetreadyLog(from int) (string, int) {
	data, _ := os.ReadFile(n.LogFile)
	if from > len(data) {
		from = len(data)
	}
	return string(data[from:]), len(data)
}

// WaitNetreadyLog waits until every want occurs in the plugin's log after
// offset from.
func (n *TestNet) WaitNetreadyLog(t *testing.T, from int, limit time.Duration, want ...string) string {
	t.Helper()
	var l string
	for start := time.Now(); time.Since(start) < limit; time.Sleep(100 * time.Millisecond) {
		l, _ = n.NetreadyLog(from)
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			return l
		}
	}
	t.Fatalf("netready log: not all of %q within %s:\n%s", want, limit, harness.Tail(l, 30))
	return ""
}

// PrevResult100 is a 1.0.0 result for one pod IP on eth0.
func PrevResult100(ip, gw, nsPath string) []byte {
	return []byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"` + nsPath + `"}],` +
		`"ips":[{"address":"` + ip + `","gateway":"` + gw + `","interface":0}],"dns":{}}`)
}

// IPTablesChain creates a filter chain that the test removes.
func IPTablesChain(t testing.TB, name string) {
	t.Helper()
	harness.MustRun(t, "iptables", "-w", "5", "-N", name)
	t.Cleanup(func() {
		exec.Command("iptables", "-w", "5", "-F", name).Run()
		exec.Command("iptables", "-w", "5", "-X", name).Run()
	})
}

// TestNet is one test's network: a conflist from conflists/ with names,
// subnets and folders made unique to the test.
type TestNet struct {
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

// NewNet loads conflists/<file>, makes it unique, lets edit change it, writes
// it and arms the network safety rules: no forwarding out of the subnet.
func NewNet(t testing.TB, file string, edit func(n *TestNet, list map[string]any)) *TestNet {
	t.Helper()
	raw, err := os.ReadFile(harness.RepoPath("conflists", file))
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	id := harness.RandomHex(3)
	third := 100 + int(hexByte(id))%150
	n := &TestNet{
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
	for _, p := range Plugins(list) {
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
	n.Write()
	GuardForwarding(t, n.Subnet)
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

// Plugins returns the entries of a conflist's plugins list.
func Plugins(list map[string]any) []map[string]any {
	var out []map[string]any
	for _, p := range list["plugins"].([]any) {
		out = append(out, p.(map[string]any))
	}
	return out
}

// Netready returns the netready entry of the conflist.
func (n *TestNet) Netready() map[string]any {
	for _, p := range Plugins(n.List) {
		if p["type"] == "netready" {
			return p
		}
	}
	n.t.Fatal("conflist has no netready entry")
	return nil
}

// Write writes the conflist to ConfDir, atomically.
func (n *TestNet) Write() {
	data, _ := json.MarshalIndent(n.List, "", "  ")
	// Atomically: a runtime that reads a half-written file takes the
	// node's network down.
	if err := atomicfile.Write(filepath.Join(n.ConfDir, n.Name+".conflist"), data, 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// GuardForwarding drops anything forwarded from the test subnet to outside
// it, before any pod exists (TESTBED network safety).
func GuardForwarding(t testing.TB, subnet string) {
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

// NewNS makes a pod netns that the test removes.
func NewNS(t testing.TB) ns.NetNS {
	t.Helper()
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		netns.Close()
		if err := UnmountNS(netns); err != nil {
			t.Errorf("unmount netns: %v", err)
		}
	})
	return netns
}

// UnmountNS removes a test netns. A plugin killed inside it can keep the
// mount busy for a moment while its threads exit, so EBUSY is retried.
func UnmountNS(netns ns.NetNS) error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = testutils.UnmountNS(netns); err == nil || !strings.Contains(err.Error(), "busy") {
			return err
		}
	}
	return err
}

// Cnitool runs the real cnitool; extra are KEY=VALUE settings.
func (n *TestNet) Cnitool(verb, nsPath string, extra ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(harness.CNIBinDir, "cnitool"), verb, n.Name, nsPath)
	cmd.Env = append(os.Environ(), "NETCONFPATH="+n.ConfDir, "CNI_PATH="+harness.PluginPath)
	cmd.Env = append(cmd.Env, extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("cnitool %s: %v: %s%s", verb, err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// Add runs cnitool add and arranges a DEL at cleanup, so nothing leaks
// when the test fails half-way.
func (n *TestNet) Add(nsPath string, extra ...string) (string, error) {
	n.t.Cleanup(func() { n.Cnitool("del", nsPath, extra...) })
	return n.Cnitool("add", nsPath, extra...)
}

// ContainerID is the ID cnitool gives a netns path.
func ContainerID(nsPath string) string {
	s := sha512.Sum512([]byte(nsPath))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

// MarkerPath is where the plugin writes the marker of an attachment.
func (n *TestNet) MarkerPath(cid, ifName string) string {
	return filepath.Join(n.StateDir, n.Name, cid+"_"+ifName+".json")
}

// ReadMarker reads an attachment's marker, failing the test if it cannot.
func (n *TestNet) ReadMarker(cid, ifName string) *marker.Marker {
	n.t.Helper()
	m, err := marker.ReadFile(n.MarkerPath(cid, ifName))
	if err != nil {
		n.t.Fatalf("marker: %v", err)
	}
	return m
}

// Libcni gives the CNI error codes that cnitool does not print.
func (n *TestNet) Libcni() (*libcni.CNIConfig, *libcni.NetworkConfigList) {
	n.t.Helper()
	data, _ := json.Marshal(n.List)
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		n.t.Fatal(err)
	}
	return libcni.NewCNIConfigWithCacheDir(strings.Split(harness.PluginPath, ":"), n.Cache, nil), list
}

// CNICode returns the code of a CNI error, or 0.
func CNICode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// Invoke runs the netready binary directly, as a runtime would.
func Invoke(t testing.TB, command string, stdin []byte, env ...string) (string, *types.Error) {
	t.Helper()
	return InvokeBin(t, filepath.Join(harness.BinDir, "netready"), command, stdin, env...)
}

// InvokeBin is Invoke with another copy of the plugin.
func InvokeBin(t testing.TB, bin, command string, stdin []byte, env ...string) (string, *types.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append([]string{"CNI_COMMAND=" + command, "CNI_PATH=" + harness.PluginPath, "PATH=" + os.Getenv("PATH")}, env...)
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

// ApplyNFT runs an nft script as one transaction.
func ApplyNFT(script string) error {
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

// NSName is the name `ip -n` knows a test netns by.
func NSName(netns ns.NetNS) string {
	return filepath.Base(netns.Path())
}

// PluginConf is the netready entry as libcni hands it to the plugin, with
// prevResult (a JSON object) if given.
func (n *TestNet) PluginConf(prevResult []byte) []byte {
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

// ShipWithoutNetready rewrites the conflist as a network plugin would ship
// it, without netready, and returns the netready entry it took out.
func (n *TestNet) ShipWithoutNetready() []byte {
	entry, _ := json.Marshal(n.Netready())
	var chain []any
	for _, p := range Plugins(n.List) {
		if p["type"] != "netready" {
			chain = append(chain, p)
		}
	}
	n.List["plugins"] = chain
	n.Write()
	return entry
}

// PluginDir is a runtime's CNI bin folder holding copies of the named
// reference plugins, for the installer to add netready to.
func PluginDir(t testing.TB, names ...string) string {
	t.Helper()
	bin := t.TempDir()
	for _, p := range names {
		data, err := os.ReadFile(filepath.Join(harness.CNIBinDir, p))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, p), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// Status runs STATUS through libcni and returns the CNI error, if any, and
// how long it took.
func (n *TestNet) Status(t *testing.T) (*types.Error, time.Duration) {
	t.Helper()
	cni, list := n.Libcni()
	start := time.Now()
	err := cni.GetStatusNetworkList(context.Background(), list)
	took := time.Since(start)
	if err == nil {
		return nil, took
	}
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("STATUS: %v is not a CNI error", err)
	}
	return e, took
}
