//go:build integration

package agents

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containernetworking/cni/libcni"
)

// Capture runs tcpdump, when installed, on the server's eth0 and on every
// interface of node A's netns (the underlay's Geneve packets both ways,
// and each client's host veth) into dir, until the test ends: a failed
// first connection then shows where its packet went. A's ovs-vswitchd
// logs each upcall (dpif_netdev at debug) into its log.
func (b *CrossNodeBed) Capture(dir string) {
	if _, err := exec.LookPath("tcpdump"); err != nil {
		b.t.Logf("no tcpdump: no capture")
		return
	}
	b.t.Cleanup(func() {
		if data, err := os.ReadFile(b.Log); err == nil {
			os.WriteFile(filepath.Join(dir, "netready.log"), data, 0o644)
		}
	})
	for _, c := range []struct{ name, netns, dev string }{
		{"server", filepath.Base(b.ServerNS), "eth0"},
		{"a-any", b.OVN.A.NS, "any"},
	} {
		cmd := exec.Command("ip", "netns", "exec", c.netns, "tcpdump", "-n", "-U", "-s", "256", "-i", c.dev, "-w", filepath.Join(dir, c.name+".pcap"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			b.t.Logf("tcpdump %s: %v", c.name, err)
			continue
		}
		b.t.Cleanup(func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() })
	}
	b.OVN.A.Appctl("vlog/set", "dpif_netdev:file:dbg")
	b.t.Cleanup(func() {
		for _, c := range []*OVNChassis{b.OVN.A, b.OVN.B} {
			if data, err := os.ReadFile(filepath.Join(c.dir, "vswitchd.log")); err == nil {
				os.WriteFile(filepath.Join(dir, c.Name+"-vswitchd.log"), data, 0o644)
			}
			if data, err := os.ReadFile(filepath.Join(c.dir, "controller.log")); err == nil {
				os.WriteFile(filepath.Join(dir, c.Name+"-controller.log"), data, 0o644)
			}
		}
	})
}

// Counters is each node's OVS coverage counters that count drops and
// upcalls, by name, for a diagnosis to compare before and after.
func (b *CrossNodeBed) Counters() map[string]int {
	out := map[string]int{}
	for _, c := range []*OVNChassis{b.OVN.A, b.OVN.B} {
		for _, l := range strings.Split(c.Appctl("coverage/show"), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 || !strings.Contains(l, "total:") || !(strings.Contains(f[0], "drop") || strings.Contains(f[0], "upcall") || strings.Contains(f[0], "xlate")) {
				continue
			}
			var n int
			fmt.Sscan(f[len(f)-1], &n)
			out[c.Name+" "+f[0]] = n
		}
	}
	return out
}

// Diagnose is what OVN and the kernel say about a client whose first
// connection failed: both pods' neighbours, each node's conntrack and
// datapath flows for the pair, a trace of the client's SYN on A, the
// client's binding in the SB, and the daemons' latest log lines.
func (b *CrossNodeBed) Diagnose(rt *libcni.RuntimeConf, ip string, before map[string]int) string {
	var s strings.Builder
	section := func(title, body string) { fmt.Fprintf(&s, "== %s\n%s\n", title, strings.TrimSpace(body)) }
	run := func(argv ...string) string {
		out, _ := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		return string(out)
	}
	grep := func(text string, keys ...string) string {
		var out []string
		for _, l := range strings.Split(text, "\n") {
			for _, k := range keys {
				if strings.Contains(l, k) {
					out = append(out, l)
					break
				}
			}
		}
		return strings.Join(out, "\n")
	}
	port := "default_" + podName(rt)
	var moved []string
	for k, v := range b.Counters() {
		if v != before[k] {
			moved = append(moved, fmt.Sprintf("%s +%d", k, v-before[k]))
		}
	}
	section("counters moved since before ADD", strings.Join(moved, "\n"))
	section("client neigh", run("ip", "-n", filepath.Base(rt.NetNS), "neigh"))
	section("server neigh", run("ip", "-n", filepath.Base(b.ServerNS), "neigh"))
	mac := strings.TrimSpace(run("ip", "netns", "exec", filepath.Base(rt.NetNS), "cat", "/sys/class/net/eth0/address"))
	for _, c := range []*OVNChassis{b.OVN.A, b.OVN.B} {
		section(c.Name+" conntrack", grep(c.Appctl("dpctl/dump-conntrack"), ip))
		section(c.Name+" datapath flows", grep(c.Appctl("dpctl/dump-flows"), ip, mac))
		section(c.Name+" tunnel neighbours", c.Appctl("tnl/neigh/show"))
		section(c.Name+" vswitchd warnings", grep(c.Log("vswitchd"), "WARN", "ERR"))
		section(c.Name+" ovn-controller", c.Log("controller"))
	}
	host := strings.Trim(strings.TrimSpace(b.OVN.A.Vsctl("--bare", "--columns=name", "find", "Interface", "external_ids:sandbox="+rt.ContainerID)), `"`)
	flow := fmt.Sprintf("in_port=%s,tcp,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=%s,nw_ttl=64,tp_src=40000,tp_dst=8080,tcp_flags=0x002",
		host, mac, PodMAC(b.ServerIP), ip, b.ServerIP)
	section("A: trace of the SYN", b.OVN.A.Appctl("ofproto/trace", "br-int", flow))
	section("SB Port_Binding "+port, b.OVN.Sbctl("find", "Port_Binding", "logical_port="+port))
	section("SB Chassis_Private", b.OVN.Sbctl("list", "Chassis_Private"))
	section("second connection", fmt.Sprint(b.Connect(rt)))
	return s.String()
}

func podName(rt *libcni.RuntimeConf) string {
	for _, kv := range rt.Args {
		if kv[0] == "K8S_POD_NAME" {
			return kv[1]
		}
	}
	return ""
}

// WriteDiagnosis stores Diagnose's text in dir, named for the pod.
func (b *CrossNodeBed) WriteDiagnosis(dir string, rt *libcni.RuntimeConf, ip string, before map[string]int) string {
	path := filepath.Join(dir, "fail-"+podName(rt)+".txt")
	os.WriteFile(path, []byte(b.Diagnose(rt, ip, before)), 0o644)
	return path
}
