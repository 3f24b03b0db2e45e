//go:build integration

package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestBadEntryNeverBreaksCleanup: a typo in the netready entry (here made
// after the pod was added, as an operator's edit would) must not stop DEL,
// or the main plugin's DEL never runs and the pod's IP and veth leak. GC
// goes on too; STATUS stays green (ADD reports the entry).
func TestBadEntryNeverBreaksCleanup(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}, map[string]any{"kind": "route"}}
	})
	cni, list := n.Libcni()
	ctx := context.Background()
	keep, gone := cnitest.NewNS(t), cnitest.NewNS(t)
	rtKeep := &libcni.RuntimeConf{ContainerID: "keep-" + n.ID, NetNS: keep.Path(), IfName: "eth0"}
	rtGone := &libcni.RuntimeConf{ContainerID: "gone-" + n.ID, NetNS: gone.Path(), IfName: "eth0"}
	for _, rt := range []*libcni.RuntimeConf{rtKeep, rtGone} {
		if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { cni.DelNetworkList(ctx, list, rtKeep) })
	if ips := allocated(t, n); len(ips) != 2 {
		t.Fatalf("host-local allocations after two ADDs = %v", ips)
	}

	// The operator's typo, and an out-of-range timeout.
	n.Netready()["checks"] = []any{map[string]any{"kind": "iptables", "tabel": "filter", "chain": "X", "match": "y"}}
	n.Netready()["timeout"] = "10m"
	cni, list = n.Libcni()

	if err := cni.DelNetworkList(ctx, list, rtGone); err != nil {
		t.Fatalf("DEL with a bad entry = %v, want success", err)
	}
	if _, err := os.Stat(n.MarkerPath(rtGone.ContainerID, "eth0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker still there after DEL: %v", err)
	}
	if ips := allocated(t, n); len(ips) != 1 {
		t.Errorf("host-local allocations after DEL = %v, want 1: bridge/host-local DEL did not run", ips)
	}
	if out := harness.MustRun(t, "ip", "-n", cnitest.NSName(gone), "link"); strings.Contains(out, "eth0") {
		t.Errorf("the pod's veth survived DEL:\n%s", out)
	}
	// Twice, and with no netns, as containerd's rmp does.
	if err := cni.DelNetworkList(ctx, list, rtGone); err != nil {
		t.Errorf("second DEL = %v", err)
	}
	if err := cni.DelNetworkList(ctx, list, &libcni.RuntimeConf{ContainerID: rtGone.ContainerID, IfName: "eth0"}); err != nil {
		t.Errorf("DEL without a netns = %v", err)
	}
	log, _ := os.ReadFile(n.LogFile)
	if !strings.Contains(string(log), `unknown key \"tabel\"`) {
		t.Errorf("the DEL did not log the entry's problem; log:\n%s", log)
	}

	// GC with the bad entry keeps what is valid and removes the rest.
	os.WriteFile(n.MarkerPath("stale-"+n.ID, "eth0"), []byte("{}"), 0o644)
	if err := cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: rtKeep.ContainerID, IfName: "eth0"}}}); err != nil {
		t.Errorf("GC with a bad entry = %v", err)
	}
	if _, err := os.Stat(n.MarkerPath("stale-"+n.ID, "eth0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("GC left the stale marker")
	}
	if _, err := os.Stat(n.MarkerPath(rtKeep.ContainerID, "eth0")); err != nil {
		t.Errorf("GC removed a valid attachment's marker: %v", err)
	}

	// STATUS stays green: a typo must not take the node NotReady.
	if err := cni.GetStatusNetworkList(ctx, list); err != nil {
		t.Errorf("STATUS with a bad entry = %v (code %d), want success", err, cnitest.CNICode(err))
	}
}

// TestCleanupFailurePaths, through the plugin binary as a runtime runs
// it: DEL exits 0 even when the marker cannot be removed (GC will), and
// GC with a keep-list it cannot read fails and removes nothing.
func TestCleanupFailurePaths(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", nil)
	env := []string{"CNI_CONTAINERID=stuck", "CNI_IFNAME=eth0", "CNI_NETNS=", "CNI_PATH=" + harness.PluginPath}
	// A directory that is not empty where the marker is: remove fails.
	stuck := n.MarkerPath("stuck", "eth0")
	if err := os.MkdirAll(filepath.Join(stuck, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, e := cnitest.Invoke(t, "DEL", n.PluginConf(nil), env...); e != nil {
		t.Errorf("DEL with a marker it cannot remove = %+v (%s), want exit 0", e, out)
	}
	log, _ := os.ReadFile(n.LogFile)
	if !strings.Contains(string(log), "cannot remove the marker; GC will") {
		t.Errorf("DEL did not log the marker it left:\n%s", log)
	}
	os.RemoveAll(stuck)

	keep := n.MarkerPath("keep", "eth0")
	os.MkdirAll(filepath.Dir(keep), 0o755)
	os.WriteFile(keep, []byte("{}"), 0o644)
	conf := map[string]any{}
	json.Unmarshal(n.PluginConf(nil), &conf)
	conf["cniVersion"] = "1.1.0"
	conf["cni.dev/valid-attachments"] = map[string]any{"containerID": "keep"} // not a list
	stdin, _ := json.Marshal(conf)
	_, e := cnitest.Invoke(t, "GC", stdin, "CNI_PATH="+harness.PluginPath)
	if e == nil || e.Code != types.ErrDecodingFailure || !strings.Contains(e.Msg, "GC removed nothing") {
		t.Errorf("GC with an unreadable keep-list = %+v, want code 2 saying it removed nothing", e)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("GC removed a marker although it could not read the keep-list: %v", err)
	}
}

// allocated lists host-local's allocation files for the network.
func allocated(t *testing.T, n *cnitest.TestNet) []string {
	t.Helper()
	entries, _ := os.ReadDir(n.IPAMDir)
	var ips []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
	}
	return ips
}

// TestMatchAtTokenBoundaries: a rule for the neighbour 10.x.x.50, or a
// comment naming pod web-10, never makes ADD ready for 10.x.x.5 / web-1,
// in iptables (run, or read through nftables netlink) and in nftables; the
// rule for the pod itself does.
func TestMatchAtTokenBoundaries(t *testing.T) {
	type source struct {
		name     string
		check    func(id string) map[string]any
		setup    func(t *testing.T, id string)
		neighbor func(id, prefix string) []string // rules for another pod
		own      func(id, prefix string) []string // the rule for this pod
		after    func(t *testing.T)               // what else must hold
	}
	var realIPTables, ran string
	ipt := func(args ...string) []string { return append([]string{"iptables", "-w", "5"}, args...) }
	nft := func(rule string) []string { return []string{"nft", rule} }
	sources := []source{
		{
			name: "iptables",
			check: func(id string) map[string]any {
				return map[string]any{"kind": "iptables", "chain": "NRM" + id, "match": "{{.IP}}"}
			},
			setup: func(t *testing.T, id string) { cnitest.IPTablesChain(t, "NRM"+id) },
			neighbor: func(id, p string) []string {
				return ipt("-A", "NRM"+id, "-s", p+"50/32", "-m", "comment", "--comment", "pod default/web-10", "-j", "ACCEPT")
			},
			own: func(id, p string) []string { return ipt("-A", "NRM"+id, "-s", p+"5/32", "-j", "ACCEPT") },
		},
		{
			name: "iptables comment",
			check: func(id string) map[string]any {
				return map[string]any{"kind": "iptables", "chain": "NRC" + id, "match": "pod {{.PodNamespace}}/{{.PodName}}"}
			},
			setup: func(t *testing.T, id string) { cnitest.IPTablesChain(t, "NRC"+id) },
			neighbor: func(id, p string) []string {
				return ipt("-A", "NRC"+id, "-s", p+"50/32", "-m", "comment", "--comment", "pod default/web-10", "-j", "ACCEPT")
			},
			own: func(id, p string) []string {
				return ipt("-A", "NRC"+id, "-s", p+"5/32", "-m", "comment", "--comment", "pod default/web-1", "-j", "ACCEPT")
			},
		},
		{
			// With iptables-nft, an address form is read from the rule's
			// expressions through netlink, and iptables never runs: the
			// plugin finds an `iptables` on its PATH that is
			// xtables-nft-multi by name but only records that it ran.
			name: "iptables address, read through nftables netlink",
			check: func(id string) map[string]any {
				return map[string]any{"kind": "iptables", "chain": "NRA" + id, "match": "-s {{.IP}}/32"}
			},
			setup: func(t *testing.T, id string) {
				if out, _ := exec.Command("iptables", "--version").CombinedOutput(); !strings.Contains(string(out), "nf_tables") {
					t.Fatalf("this case needs iptables-nft, as the node image and CI have; iptables --version: %s", out)
				}
				cnitest.IPTablesChain(t, "NRA"+id)
				real, err := exec.LookPath("iptables")
				if err != nil {
					t.Fatal(err)
				}
				realIPTables = real
				fake := t.TempDir()
				ran = filepath.Join(fake, "ran")
				os.WriteFile(filepath.Join(fake, "xtables-nft-multi"), []byte("#!/bin/sh\necho \"$0 $*\" >> "+ran+"\nexit 1\n"), 0o755)
				os.Symlink("xtables-nft-multi", filepath.Join(fake, "iptables"))
				t.Setenv("PATH", fake+":"+os.Getenv("PATH"))
			},
			neighbor: func(id, p string) []string {
				return []string{realIPTables, "-w", "5", "-A", "NRA" + id, "-s", p + "50/32", "-j", "ACCEPT"}
			},
			own: func(id, p string) []string {
				return []string{realIPTables, "-w", "5", "-A", "NRA" + id, "-s", p + "5/32", "-j", "ACCEPT"}
			},
			after: func(t *testing.T) {
				if out, err := os.ReadFile(ran); err == nil {
					t.Errorf("the plugin ran iptables for an address match with iptables-nft:\n%s", out)
				}
			},
		},
		{
			name: "nftables",
			check: func(id string) map[string]any {
				return map[string]any{"kind": "nftables", "family": "inet", "table": "nrm" + id, "chain": "c", "match": "saddr {{.IP}}"}
			},
			setup: func(t *testing.T, id string) {
				harness.MustRun(t, "nft", "add table inet nrm"+id+"; add chain inet nrm"+id+" c")
				t.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", "nrm"+id).Run() })
			},
			neighbor: func(id, p string) []string {
				return nft("add rule inet nrm" + id + " c ip saddr " + p + "50 accept comment \"pod default/web-10\"")
			},
			own: func(id, p string) []string { return nft("add rule inet nrm" + id + " c ip saddr " + p + "5 accept") },
		},
	}
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			n := cnitest.NewNet(t, "bridge.conflist", nil)
			n.Netready()["timeout"] = "1s"
			n.Netready()["checks"] = []any{src.check(n.ID)}
			// The pod always gets .5, so that its neighbour is .50.
			ipam := cnitest.Plugins(n.List)[0]["ipam"].(map[string]any)
			ipam["ranges"] = []any{[]any{map[string]any{"subnet": n.Subnet, "rangeStart": n.Prefix + "5", "rangeEnd": n.Prefix + "5"}}}
			n.Write()
			src.setup(t, n.ID)
			harness.MustRun(t, src.neighbor(n.ID, n.Prefix)[0], src.neighbor(n.ID, n.Prefix)[1:]...)
			cni, list := n.Libcni()
			netns := cnitest.NewNS(t)
			rt := &libcni.RuntimeConf{ContainerID: "m-" + n.ID, NetNS: netns.Path(), IfName: "eth0",
				Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web-1"}, {"K8S_POD_UID", "u-1"}}}
			t.Cleanup(func() { cni.DelNetworkList(context.Background(), list, rt) })
			_, err := cni.AddNetworkList(context.Background(), list, rt)
			if cnitest.CNICode(err) != types.ErrTryAgainLater {
				t.Fatalf("ADD with only the neighbour's rule = %v, want code 11: the match claimed the wrong pod", err)
			}
			cni.DelNetworkList(context.Background(), list, rt)
			own := src.own(n.ID, n.Prefix)
			harness.MustRun(t, own[0], own[1:]...)
			if _, err := cni.AddNetworkList(context.Background(), list, rt); err != nil {
				t.Fatalf("ADD with the pod's own rule = %v", err)
			}
			if src.after != nil {
				src.after(t)
			}
		})
	}
}

// TestNFTablesSetNotifications: netready trusts the kernel's notification
// of an element added to the pod's set without reading the set back, so
// nothing else may pass for it. While ADD waits, the pod's IP keeps being
// added to another set and to a same-named set of another family, a
// neighbour's IP to the pod's set, and the pod's IP added and removed in
// one transaction: ADD times out. The pod's own element, or a range
// around the IP in an interval set (which only a probe can judge), then
// makes ADD ready.
func TestNFTablesSetNotifications(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", nil)
	table := "nrs" + n.ID
	ipam := cnitest.Plugins(n.List)[0]["ipam"].(map[string]any)
	ipam["ranges"] = []any{[]any{map[string]any{"subnet": n.Subnet, "rangeStart": n.Prefix + "5", "rangeEnd": n.Prefix + "5"}}}
	nft := func(script string) {
		if err := cnitest.ApplyNFT(script); err != nil {
			t.Error(err)
		}
	}
	nft(fmt.Sprintf(`add table inet %[1]s
add set inet %[1]s pods { type ipv4_addr; }
add set inet %[1]s other { type ipv4_addr; }
add set inet %[1]s ranges { type ipv4_addr; flags interval; }
add table ip %[1]s
add set ip %[1]s pods { type ipv4_addr; }`, table))
	t.Cleanup(func() {
		exec.Command("nft", "delete", "table", "inet", table).Run()
		exec.Command("nft", "delete", "table", "ip", table).Run()
	})
	ip, neighbour := n.Prefix+"5", n.Prefix+"6"
	cni, list := n.Libcni()
	netns := cnitest.NewNS(t)
	rt := &libcni.RuntimeConf{ContainerID: "s-" + n.ID, NetNS: netns.Path(), IfName: "eth0"}
	add := func(set, timeout string) error {
		t.Helper()
		n.Netready()["timeout"] = timeout
		n.Netready()["checks"] = []any{map[string]any{"kind": "nftables", "family": "inet", "table": table, "set": set}}
		n.Write()
		cni, list = n.Libcni()
		_, err := cni.AddNetworkList(context.Background(), list, rt)
		return err
	}
	t.Cleanup(func() { cni.DelNetworkList(context.Background(), list, rt) })

	stop := make(chan struct{})
	decoys := make(chan int)
	go func() {
		rounds := 0
		defer func() { decoys <- rounds }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, tx := range []string{
				fmt.Sprintf("add element inet %s other { %s }", table, ip),
				fmt.Sprintf("add element ip %s pods { %s }", table, ip),
				fmt.Sprintf("add element inet %s pods { %s }", table, neighbour),
				fmt.Sprintf("add element inet %[1]s pods { %[2]s }\ndelete element inet %[1]s pods { %[2]s }", table, ip),
				fmt.Sprintf("flush set inet %[1]s other\nflush set ip %[1]s pods\nflush set inet %[1]s pods", table),
			} {
				nft(tx)
			}
			rounds++
		}
	}()
	err := add("pods", "2s")
	close(stop)
	if rounds := <-decoys; rounds < 5 {
		t.Errorf("only %d rounds of decoys while ADD waited", rounds)
	}
	if cnitest.CNICode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "nftables set inet/"+table+"/pods has "+ip) {
		t.Fatalf("ADD with only decoys = %v, want code 11 naming the set: something else passed for the pod's element", err)
	}
	cni.DelNetworkList(context.Background(), list, rt)

	for _, tc := range []struct{ set, element string }{
		{"pods", ip},
		{"ranges", n.Subnet},
	} {
		t.Run(tc.set, func(t *testing.T) {
			go func() {
				time.Sleep(500 * time.Millisecond)
				nft(fmt.Sprintf("add element inet %s %s { %s }", table, tc.set, tc.element))
			}()
			if err := add(tc.set, "10s"); err != nil {
				t.Fatalf("ADD with %s in set %s = %v", tc.element, tc.set, err)
			}
			if m := n.ReadMarker(rt.ContainerID, "eth0"); m.State != marker.StateReady {
				t.Errorf("marker = %+v, want ready", m)
			}
			cni.DelNetworkList(context.Background(), list, rt)
		})
	}
}

// TestHTTPNeverResolvesNames: the plugin runs with a resolver that records
// every query. A URL whose host looks like loopback but is a name is
// refused (code 7) with no query; "localhost" is dialled as 127.0.0.1 with
// no query. A control run of getent proves that queries are recorded.
func TestHTTPNeverResolvesNames(t *testing.T) {
	netns := cnitest.NewNS(t)
	var queries atomic.Int32
	var conn net.PacketConn
	err := netns.Do(func(ns.NetNS) error {
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			return fmt.Errorf("lo up: %v %s", err, out)
		}
		var err error
		conn, err = net.ListenPacket("udp", "127.0.0.1:53")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := conn.ReadFrom(buf); err != nil {
				return
			}
			queries.Add(1)
		}
	}()
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(resolv, []byte("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"), 0o644)
	// inNS runs argv in the netns with the recording resolver, in a
	// private mount namespace so the host's resolv.conf is untouched.
	inNS := func(stdin []byte, env []string, argv ...string) ([]byte, error) {
		script := `r=$0; n=$1; shift; mount --bind "$r" /etc/resolv.conf && exec nsenter --net="$n" -- "$@"`
		args := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, resolv, netns.Path()}, argv...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "unshare", args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdin = bytes.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.Bytes(), err
	}
	if out, _ := inNS(nil, nil, "getent", "hosts", "control.netready.test"); queries.Load() == 0 {
		t.Fatalf("the recording resolver saw no query from getent (%s): the test cannot prove anything", out)
	}
	queries.Store(0)

	n := cnitest.NewNet(t, "bridge.conflist", nil)
	for _, tc := range []struct {
		name, url, verb string
		wantCode        uint
		want            string
	}{
		// An entry ADD refuses leaves STATUS green; it looks nothing up.
		{"name that looks like loopback, STATUS", "http://127.attacker.example:9099/live", "STATUS", 0, ""},
		{"name that looks like loopback, ADD", "http://127.attacker.example:9099/live", "ADD", types.ErrInvalidNetworkConfig, "the host must be an IP literal"},
		{"localhost is not looked up", "http://localhost:1/live", "STATUS", types.ErrPluginNotAvailable, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.Netready()["status"] = map[string]any{"failAfter": "0s", "agents": []any{map[string]any{"kind": "http", "url": tc.url}}}
			stdin := n.PluginConf([]byte(`{"cniVersion":"1.1.0","interfaces":[],"ips":[]}`))
			env := []string{"CNI_COMMAND=" + tc.verb, "CNI_CONTAINERID=dns-" + n.ID, "CNI_IFNAME=eth0", "CNI_NETNS=" + netns.Path(), "CNI_PATH=" + harness.PluginPath}
			out, err := inNS(stdin, env, filepath.Join(harness.BinDir, "netready"))
			switch {
			case tc.wantCode == 0 && err != nil:
				t.Fatalf("%s = %s, want success", tc.verb, out)
			case tc.wantCode != 0 && err == nil:
				t.Fatalf("%s succeeded: %s", tc.verb, out)
			}
			var e types.Error
			if tc.wantCode == 0 {
				// nothing to decode
			} else if jerr := json.Unmarshal(out, &e); jerr != nil || e.Code != tc.wantCode || !strings.Contains(e.Msg+e.Details, tc.want) {
				t.Errorf("%s = %s, want code %d containing %q", tc.verb, out, tc.wantCode, tc.want)
			}
			time.Sleep(100 * time.Millisecond)
			if q := queries.Load(); q != 0 {
				t.Errorf("the plugin sent %d DNS queries", q)
			}
		})
	}
}
