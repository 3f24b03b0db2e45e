//go:build integration

package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/notes"
	"github.com/netready/netready/pkg/wait"
	"github.com/netready/netready/pkg/watch"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestAddWithoutPrevResult: netready is only a chained plugin.
func TestAddWithoutPrevResult(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", nil)
	_, e := cnitest.Invoke(t, "ADD", n.PluginConf(nil), "CNI_CONTAINERID=c1", "CNI_IFNAME=eth0", "CNI_NETNS=/var/run/netns/none")
	if e == nil || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, "chained plugin") {
		t.Errorf("ADD without prevResult = %+v, want code 7 about a chained plugin", e)
	}
}

// TestInvalidConfigThroughLibcni: a bad key fails ADD with code 7 naming
// the key. STATUS stays green (a typo must not take the node NotReady) and
// leaves the message, naming every key, for the sidecar.
func TestInvalidConfigThroughLibcni(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["timeout"] = "10 minutes"
		n.Netready()["checks"] = []any{map[string]any{"kind": "bgp"}}
	})
	cni, list := n.Libcni()
	if err := cni.GetStatusNetworkList(context.Background(), list); err != nil {
		t.Errorf("STATUS with a bad entry = %v (code %d), want success: netready's own entry never fails STATUS", err, cnitest.CNICode(err))
	}
	note, err := os.ReadFile(filepath.Join(n.StateDir, n.Name, notes.InvalidConfigFile))
	if err != nil || !strings.Contains(string(note), `invalid configuration: "timeout" "10 minutes"`) || !strings.Contains(string(note), `unknown check "kind" "bgp"`) {
		t.Errorf("the note for the sidecar = %q, %v; want the message naming timeout and the kind", note, err)
	}
	netns := cnitest.NewNS(t)
	_, err = cni.AddNetworkList(context.Background(), list, &libcni.RuntimeConf{ContainerID: "bad-" + n.ID, NetNS: netns.Path(), IfName: "eth0"})
	if cnitest.CNICode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), `"timeout" "10 minutes"`) {
		t.Errorf("ADD with a bad config = %v (code %d), want code 7 naming timeout", err, cnitest.CNICode(err))
	}
	cni.DelNetworkList(context.Background(), list, &libcni.RuntimeConf{ContainerID: "bad-" + n.ID, NetNS: netns.Path(), IfName: "eth0"})
}

// TestPrevResultPassThrough: ADD prints prevResult unchanged, for every
// supported version (libcni hands prevResult over in the conf's version).
func TestPrevResultPassThrough(t *testing.T) {
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, list map[string]any) {
				list["cniVersion"] = v
				n.Netready()["checks"] = []any{}
			})
			var res current.Result
			json.Unmarshal(cnitest.PrevResult100("10.200.1.5/24", "10.200.1.1", "/var/run/netns/x"), &res)
			res.Routes = []*types.Route{{Dst: mustCIDR(t, "10.200.0.0/16")}}
			res.DNS = types.DNS{Nameservers: []string{"10.200.1.53"}}
			conv, err := res.GetAsVersion(v)
			if err != nil {
				t.Fatal(err)
			}
			prev, _ := json.Marshal(conv)
			out, e := cnitest.Invoke(t, "ADD", n.PluginConf(prev), "CNI_CONTAINERID=pass-"+strings.ReplaceAll(v, ".", ""), "CNI_IFNAME=eth0", "CNI_NETNS=/var/run/netns/x")
			if e != nil {
				t.Fatalf("ADD: %+v", e)
			}
			var want, got map[string]any
			json.Unmarshal(prev, &want)
			json.Unmarshal([]byte(out), &got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("printed result differs from prevResult (-want +got):\n%s", diff)
			}
		})
	}
}

func mustCIDR(t *testing.T, s string) net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return *n
}

// TestHostileIdentifiersAreRefused: a container ID or interface name that climbs out
// of the state folder is refused and nothing is written.
func TestHostileIdentifiersAreRefused(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) { n.Netready()["checks"] = []any{} })
	prev := cnitest.PrevResult100("10.200.1.5/24", "10.200.1.1", "/var/run/netns/x")
	for _, tc := range []struct{ cid, ifName string }{
		{"../../../../tmp/escape", "eth0"}, {"ok", "../x"}, {"ok", ".."}, {"a/b", "eth0"},
	} {
		_, e := cnitest.Invoke(t, "ADD", n.PluginConf(prev), "CNI_CONTAINERID="+tc.cid, "CNI_IFNAME="+tc.ifName, "CNI_NETNS=/var/run/netns/x")
		if e == nil {
			t.Errorf("ADD with containerID %q ifName %q succeeded", tc.cid, tc.ifName)
			continue
		}
		if !strings.Contains(e.Msg, "containerID") && !strings.Contains(e.Msg, "interface name") {
			t.Errorf("ADD with containerID %q ifName %q: %q does not say which", tc.cid, tc.ifName, e.Msg)
		}
		if _, e := cnitest.Invoke(t, "DEL", n.PluginConf(nil), "CNI_CONTAINERID="+tc.cid, "CNI_IFNAME="+tc.ifName); e == nil {
			t.Errorf("DEL with containerID %q ifName %q succeeded", tc.cid, tc.ifName)
		}
	}
	var files []string
	filepath.Walk(n.StateDir, func(p string, info os.FileInfo, _ error) error {
		if info != nil && !info.IsDir() && !strings.HasSuffix(p, ".log") {
			files = append(files, p)
		}
		return nil
	})
	if _, err := os.Stat("/tmp/escape_eth0.json"); err == nil || len(files) > 0 {
		t.Errorf("hostile identifiers wrote %v", files)
	}
}

// TestNetnsGoneFailsAtOnce: a check that can never succeed fails ADD at
// once, naming the check, instead of waiting out the timeout.
func TestNetnsGoneFailsAtOnce(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["timeout"] = "30s"
		n.Netready()["checks"] = []any{map[string]any{"kind": "route"}, map[string]any{"kind": "address"}}
	})
	gone := "/var/run/netns/nr-gone-" + harness.RandomHex(3)
	start := time.Now()
	_, e := cnitest.Invoke(t, "ADD", n.PluginConf(cnitest.PrevResult100("10.200.1.5/24", "10.200.1.1", gone)),
		"CNI_CONTAINERID=gone", "CNI_IFNAME=eth0", "CNI_NETNS="+gone)
	if e == nil || !strings.Contains(e.Msg, "check address 10.200.1.5") || !strings.Contains(e.Msg, gone) {
		t.Errorf("ADD into a missing netns = %+v, want a failure naming the address check and the netns", e)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("ADD waited %s for a check that can never succeed", time.Since(start))
	}
}

// TestAddressCheckWaitsForIPv6DAD: the address check waits while an IPv6 address is tentative,
// and fails at once when duplicate address detection fails.
func TestAddressCheckWaitsForIPv6DAD(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}}
		n.Netready()["timeout"] = "20s"
	})
	pod, peer := cnitest.NewNS(t), cnitest.NewNS(t)
	harness.MustRun(t, "ip", "-n", cnitest.NSName(pod), "link", "add", "eth0", "type", "veth", "peer", "name", "peer0", "netns", cnitest.NSName(peer))
	harness.MustRun(t, "ip", "-n", cnitest.NSName(peer), "link", "set", "peer0", "up")
	harness.MustRun(t, "ip", "-n", cnitest.NSName(pod), "link", "set", "eth0", "up")
	ip6 := strings.TrimSuffix(n.Subnet6, "/64") + "5"
	prev := []byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"` + pod.Path() + `"}],` +
		`"ips":[{"address":"` + ip6 + `/64","interface":0}]}`)

	t.Run("tentative, then ready", func(t *testing.T) {
		harness.MustRun(t, "ip", "-n", cnitest.NSName(pod), "addr", "add", ip6+"/64", "dev", "eth0")
		if !strings.Contains(harness.MustRun(t, "ip", "-n", cnitest.NSName(pod), "-6", "addr", "show", "dev", "eth0"), "tentative") {
			t.Fatal("the kernel finished DAD before ADD ran; the test cannot prove the wait")
		}
		_, e := cnitest.Invoke(t, "ADD", n.PluginConf(prev), "CNI_CONTAINERID=dad-ok", "CNI_IFNAME=eth0", "CNI_NETNS="+pod.Path())
		if e != nil {
			t.Fatalf("ADD: %+v", e)
		}
		m := n.ReadMarker("dad-ok", "eth0")
		if m.State != "ready" || m.Checks[0].WaitedMs < 100 {
			t.Errorf("marker %s, address waitedMs %d: want ready after DAD", m.State, m.Checks[0].WaitedMs)
		}
		harness.MustRun(t, "ip", "-n", cnitest.NSName(pod), "addr", "del", ip6+"/64", "dev", "eth0")
	})
	t.Run("duplicate", func(t *testing.T) {
		harness.MustRun(t, "ip", "-n", cnitest.NSName(peer), "addr", "add", ip6+"/64", "dev", "peer0", "nodad")
		harness.MustRun(t, "ip", "-n", cnitest.NSName(pod), "addr", "add", ip6+"/64", "dev", "eth0")
		start := time.Now()
		_, e := cnitest.Invoke(t, "ADD", n.PluginConf(prev), "CNI_CONTAINERID=dad-dup", "CNI_IFNAME=eth0", "CNI_NETNS="+pod.Path())
		if e == nil || !strings.Contains(e.Msg, "duplicate address detection failed") || !strings.Contains(e.Msg, "check address "+ip6) {
			t.Errorf("ADD with a duplicate address = %+v, want a DAD failure naming the check", e)
		}
		if time.Since(start) > 15*time.Second {
			t.Errorf("ADD took %s; a DAD failure should end it at once", time.Since(start))
		}
	})
}

// TestPluginIsLean: the plugin runs on every pod start; it must not link
// the Kubernetes client or the metrics library, which only the sidecar
// needs.
func TestPluginIsLean(t *testing.T) {
	out, err := exec.Command("go", "version", "-m", filepath.Join(harness.BinDir, "netready")).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	for _, dep := range []string{"k8s.io/client-go", "k8s.io/apimachinery", "github.com/prometheus/client_golang"} {
		if strings.Contains(string(out), dep) {
			t.Errorf("bin/netready links %s", dep)
		}
	}
	if !strings.Contains(string(out), "github.com/containernetworking/cni") {
		t.Errorf("go version -m shows no dependencies at all; is this the plugin?\n%s", out)
	}
	// Packages that cost every call: pkg/httpget does the plugin's one
	// HTTP exchange instead of net/http, which links TLS and HTTP/2;
	// pkg/pool reads host-local's ranges instead of host-local's allocator
	// package, which links knftables (regular expressions compiled at
	// init, about 1 ms per call) and crypto; pkg/config expands
	// placeholders itself instead of with text/template, whose use of
	// reflect's MethodByName makes the linker keep every exported method
	// (7.4 MB instead of 4.7 MB, about 1 ms per call in page faults here).
	deps, err := exec.Command("go", "list", "-deps", "../../../plugins/meta/netready").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, deps)
	}
	for _, pkg := range strings.Fields(string(deps)) {
		switch {
		case pkg == "net/http", pkg == "sigs.k8s.io/knftables", strings.HasPrefix(pkg, "crypto/"), strings.HasSuffix(pkg, "/template"),
			strings.HasPrefix(pkg, "github.com/containernetworking/plugins/plugins/"):
			t.Errorf("the plugin imports %s", pkg)
		}
	}
}

// TestNFTablesSetProbe: a set check's probe on the kernel, for a plain set
// large enough that only a lookup of the one element (not a read of them
// all) keeps probes cheap, an interval set, an IPv6 set, a set of
// interface names and a set that does not exist.
func TestNFTablesSetProbe(t *testing.T) {
	table := "nrprobe" + harness.RandomHex(3)
	var script strings.Builder
	fmt.Fprintf(&script, `add table inet %[1]s
add set inet %[1]s pods { type ipv4_addr; }
add set inet %[1]s ranges { type ipv4_addr; flags interval; }
add set inet %[1]s pods6 { type ipv6_addr; }
add set inet %[1]s names { type ifname; }
add element inet %[1]s ranges { 10.8.0.0/24 }
add element inet %[1]s pods6 { fd00::5 }
add element inet %[1]s pods { 10.9.0.5`, table)
	for i := range 20000 {
		fmt.Fprintf(&script, ", 10.10.%d.%d", i/256, i%256)
	}
	script.WriteString(" }\n")
	if err := cnitest.ApplyNFT(script.String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", table).Run() })

	type result struct {
		Ready bool
		Why   string
		Never bool
	}
	for _, tc := range []struct {
		set, ip string
		want    result
		also    string // another pod IP, checked by a check of its own
	}{
		{"pods", "10.9.0.5", result{Ready: true}, ""},
		{"pods", "10.10.77.1", result{Ready: true}, ""},
		{"pods", "10.9.0.6", result{Why: "IP not in the set yet"}, ""},
		{"ranges", "10.8.0.200", result{Ready: true}, ""},
		{"ranges", "10.8.1.1", result{Why: "IP not in the set yet"}, ""},
		{"pods6", "fd00::5", result{Ready: true}, ""},
		{"pods6", "fd00::6", result{Why: "IP not in the set yet"}, ""},
		// An IPv4-only pod can never be in an IPv6 set; a dual-stack
		// pod's IPv6 address has its own check there.
		{"pods6", "10.9.0.5", result{Never: true}, ""},
		{"pods6", "10.9.0.5", result{Ready: true}, "fd00::5"},
		{"missing", "10.9.0.5", result{Why: "set does not exist (yet)"}, ""},
		{"names", "10.9.0.5", result{Never: true}, ""},
	} {
		t.Run(tc.set+" "+tc.ip+" "+tc.also, func(t *testing.T) {
			att := &attachment.Attachment{Network: "n", ContainerID: "c", IfName: "eth0"}
			for _, s := range []string{tc.ip, tc.also} {
				if ip := net.ParseIP(s); ip != nil {
					att.IPs = append(att.IPs, attachment.IP{Address: net.IPNet{IP: ip, Mask: net.CIDRMask(len(ip)*8, len(ip)*8)}})
				}
			}
			env := checks.NewEnv("")
			defer env.Close()
			cs, err := checks.Build([]config.CheckConf{{Kind: config.KindNFTables, Family: "inet", Table: table, Set: tc.set}}, att, env)
			if err != nil || len(cs) != len(att.IPs) {
				t.Fatalf("Build = %d checks, %v", len(cs), err)
			}
			ready, why, err := cs[0].Probe(context.Background())
			got := result{Ready: ready, Why: why, Never: errors.Is(err, checks.ErrNever)}
			if err != nil && !got.Never {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("probe (-want +got):\n%s", diff)
			}
		})
	}
}

// setCheck is met by its probe only once present is set; its source is
// the NFTSet stream a set check uses.
type setCheck struct {
	src        watch.Source
	subscribed chan struct{} // closed by the probe made after subscribing
	probes     atomic.Int32
	present    atomic.Bool
}

func (s *setCheck) Kind() string            { return "set" }
func (s *setCheck) Target() string          { return s.src.String() }
func (s *setCheck) Sources() []watch.Source { return []watch.Source{s.src} }
func (s *setCheck) Probe(context.Context) (bool, string, error) {
	present := s.present.Load()
	if s.probes.Add(1) == 2 {
		close(s.subscribed)
	}
	return present, "not yet", nil
}

// TestWakeThatShows: the kernel's notification of the element ends the
// wait at once, on a real NFTSet stream, with no safety re-check (a
// minute) and no polling; ready is then confirmed by a probe of its own.
func TestWakeThatShows(t *testing.T) {
	table := "nrshow" + harness.RandomHex(3)
	if err := cnitest.ApplyNFT("add table inet " + table + "\nadd set inet " + table + " pods { type ipv4_addr; }"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", table).Run() })
	c := &setCheck{subscribed: make(chan struct{}), src: watch.Source{Kind: watch.NFTSet,
		Element: watch.NFTElement{Family: unix.NFPROTO_INET, Table: table, Set: "pods", Key: string(net.IPv4(10, 9, 0, 5).To4())}}}
	added := make(chan error, 1)
	go func() {
		<-c.subscribed
		c.present.Store(true) // what a probe would find once nft is done
		added <- cnitest.ApplyNFT("add element inet " + table + " pods { 10.9.0.5 }")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := wait.Until(ctx, []checks.Check{c}, wait.Options{Safety: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	if !out.Ready() {
		t.Errorf("outcome = %+v, want ready from the element's notification", out)
	}
	// Before subscribing, after it, and the confirmation: no poll.
	if n := c.probes.Load(); n > 3 {
		t.Errorf("probes = %d, want 3: the notification, not polling, ended the wait", n)
	}
}

// blockingCheck is a real check whose probe made after it subscribed
// waits for release: the wait is busy while transactions land.
type blockingCheck struct {
	checks.Check
	probes     atomic.Int32
	subscribed chan struct{}
	release    chan struct{}
}

func (b *blockingCheck) Probe(ctx context.Context) (bool, string, error) {
	if b.probes.Add(1) == 2 {
		close(b.subscribed)
		<-b.release
	}
	return b.Check.Probe(ctx)
}

// TestSetAddedThenRemovedIsNotReady: ADD's wait on a real nftables set
// check is busy probing while one transaction adds the pod's IP to the set
// and the next removes it. The wait must not end ready; it ends ready only
// once a third transaction adds the IP again. (TestNFTSetAddThenRemoveBeforeRead
// in pkg/watch proves the same at the listener, without the settle below.)
func TestSetAddedThenRemovedIsNotReady(t *testing.T) {
	table := "nrflip" + harness.RandomHex(3)
	harness.MustRun(t, "nft", "add table inet "+table+"; add set inet "+table+" pods { type ipv4_addr; }")
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", table).Run() })
	// From the goroutines below: a failure is an Error, not a Fatal.
	nft := func(script string) {
		if err := cnitest.ApplyNFT(script); err != nil {
			t.Error(err)
		}
	}
	att := &attachment.Attachment{Network: "n", ContainerID: "c", IfName: "eth0",
		IPs: []attachment.IP{{Address: net.IPNet{IP: net.ParseIP("10.9.0.5").To4(), Mask: net.CIDRMask(24, 32)}}}}
	env := checks.NewEnv("")
	defer env.Close()
	cs, err := checks.Build([]config.CheckConf{{Kind: config.KindNFTables, Family: "inet", Table: table, Set: "pods"}}, att, env)
	if err != nil {
		t.Fatal(err)
	}
	c := &blockingCheck{Check: cs[0], subscribed: make(chan struct{}), release: make(chan struct{})}
	go func() {
		<-c.subscribed
		nft("add element inet " + table + " pods { 10.9.0.5 }")
		nft("delete element inet " + table + " pods { 10.9.0.5 }")
		// Both notifications are queued on the wait's socket when nft
		// returns; this gives its stream goroutines time to pass them on.
		time.Sleep(500 * time.Millisecond)
		close(c.release)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := wait.Until(ctx, []checks.Check{c}, wait.Options{Safety: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if out.Ready() {
		t.Fatal("added then removed before the wait looked: the wait ended ready with the IP absent from the set")
	}
	if !strings.Contains(out.Unmet(), table) {
		t.Errorf("unmet = %q, want the set named", out.Unmet())
	}

	c = &blockingCheck{Check: cs[0], subscribed: make(chan struct{}), release: make(chan struct{})}
	go func() {
		<-c.subscribed
		nft("add element inet " + table + " pods { 10.9.0.5 }")
		nft("delete element inet " + table + " pods { 10.9.0.5 }")
		close(c.release)
		time.Sleep(100 * time.Millisecond)
		nft("add element inet " + table + " pods { 10.9.0.5 }")
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err = wait.Until(ctx, []checks.Check{c}, wait.Options{Safety: time.Minute}); err != nil || !out.Ready() {
		t.Errorf("after the IP was added again: outcome %+v, err %v, want ready", out, err)
	}
}

// TestNFTablesProbesShareOneConnection: the checks of one ADD share one
// nftables connection, and google/nftables sends and receives in two calls.
// Probes of two sets, one holding the pod IP and one not, run at once many
// times on one Env; each must read its own set's reply.
func TestNFTablesProbesShareOneConnection(t *testing.T) {
	table := "nrshare" + harness.RandomHex(3)
	harness.MustRun(t, "nft", "add table inet "+table+
		"; add set inet "+table+" holds { type ipv4_addr; }; add element inet "+table+" holds { 10.9.0.5 }"+
		"; add set inet "+table+" lacks { type ipv4_addr; }; add element inet "+table+" lacks { 10.9.0.6 }")
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", table).Run() })
	att := &attachment.Attachment{Network: "n", ContainerID: "c", IfName: "eth0",
		IPs: []attachment.IP{{Address: net.IPNet{IP: net.ParseIP("10.9.0.5").To4(), Mask: net.CIDRMask(24, 32)}}}}
	env := checks.NewEnv("")
	defer env.Close()
	cs, err := checks.Build([]config.CheckConf{
		{Kind: config.KindNFTables, Family: "inet", Table: table, Set: "holds"},
		{Kind: config.KindNFTables, Family: "inet", Table: table, Set: "lacks"},
	}, att, env)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for round := 0; round < 300; round++ {
		var wg sync.WaitGroup
		got := make([]bool, len(cs))
		for i, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ready, _, err := c.Probe(ctx)
				if err != nil {
					t.Errorf("%s: %v", checks.Describe(c), err)
				}
				got[i] = ready
			}()
		}
		wg.Wait()
		if !got[0] || got[1] {
			t.Fatalf("round %d: set holds ready=%v (want true), set lacks ready=%v (want false)", round, got[0], got[1])
		}
	}
}
