//go:build integration

package agents

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// TwoNodeOVN is a real OVN with two chassis on this machine (TESTBED.md,
// "Two nodes on one machine"): the NB and SB databases and ovn-northd in the
// test's folder, and per node a network namespace holding its own
// ovsdb-server, ovs-vswitchd (userspace datapath) and ovn-controller. The
// nodes meet over a veth pair, Geneve between them; each node's encap IP
// sits on a second netdev bridge, br-phy, which holds the veth. Pods join
// the logical switch Switch, whose addresses are Subnet's.
type TwoNodeOVN struct {
	t      testing.TB
	dir    string
	NB, SB string // unix sockets
	A, B   *OVNChassis
	Switch string
	Subnet string // the pods' /24
	procs  []*exec.Cmd
	env    []string
	nodes  []*OVNChassis // as soon as made, for the cleanup
}

// OVNChassis is one node of a TwoNodeOVN.
type OVNChassis struct {
	o          *TwoNodeOVN
	Name       string // its system-id, the chassis name in the SB
	NS         string // its netns name
	Conf       string // its Open_vSwitch database socket
	EncapIP    string // on its br-phy
	dir        string
	env        []string
	controller *exec.Cmd
}

// ovn2Underlay is the nodes' veth subnet: encap IPs .1 (A) and .2 (B).
const ovn2Underlay = "10.200.248."

// StartTwoNodeOVN starts both nodes and the central databases, with the
// logical switch for subnet (a /24 of 10.200.0.0/16), and removes every
// process, netns and folder at cleanup, whatever failed.
func StartTwoNodeOVN(t testing.TB, subnet string) *TwoNodeOVN {
	t.Helper()
	dir, err := os.MkdirTemp("", "nr-ovn2-")
	if err != nil {
		t.Fatal(err)
	}
	id := harness.RandomHex(3)
	o := &TwoNodeOVN{t: t, dir: dir, NB: filepath.Join(dir, "nb.sock"), SB: filepath.Join(dir, "sb.sock"), Switch: "nr-ls", Subnet: subnet}
	o.env = ovnEnv(dir)
	t.Cleanup(o.stop)
	for _, db := range []struct{ name, schema, sock string }{
		{"nb", "/usr/share/ovn/ovn-nb.ovsschema", o.NB},
		{"sb", "/usr/share/ovn/ovn-sb.ovsschema", o.SB},
	} {
		o.startDB(dir, db.name, db.schema, db.sock, o.env)
	}
	o.run(o.env, "ovn-nbctl", "--db=unix:"+o.NB, "init")
	o.run(o.env, "ovn-sbctl", "--db=unix:"+o.SB, "init")
	o.start(o.env, "ovn-northd", "ovn-northd", "--ovnnb-db=unix:"+o.NB, "--ovnsb-db=unix:"+o.SB, "--no-chdir",
		"--unixctl="+filepath.Join(dir, "northd.ctl"), "--log-file="+filepath.Join(dir, "northd.log"), "--pidfile="+filepath.Join(dir, "northd.pid"))
	o.A = o.startChassis("a", "nrova-"+id, ovn2Underlay+"1")
	o.B = o.startChassis("b", "nrovb-"+id, ovn2Underlay+"2")
	// The underlay: a veth pair between the two nodes' netns, each end a
	// port of its node's br-phy.
	harness.MustRun(t, "ip", "-n", o.A.NS, "link", "add", "ul", "type", "veth", "peer", "name", "ul", "netns", o.B.NS)
	for _, c := range []*OVNChassis{o.A, o.B} {
		harness.MustRun(t, "ip", "-n", c.NS, "link", "set", "ul", "arp", "off", "up")
		c.Vsctl("add-port", "br-phy", "ul")
	}
	// A chassis is up once it registered in the SB, and the other's
	// tunnel port is in its br-int.
	for _, c := range []*OVNChassis{o.A, o.B} {
		o.waitFor(30*time.Second, "chassis "+c.Name+" to register", func() bool {
			return strings.Contains(o.output(o.env, "ovn-sbctl", "--db=unix:"+o.SB, "--columns=name", "list", "Chassis_Private"), c.Name)
		}, c)
	}
	for _, c := range []*OVNChassis{o.A, o.B} {
		o.waitFor(30*time.Second, c.Name+"'s Geneve port to the other node", func() bool {
			return strings.Contains(o.output(c.env, "ovs-vsctl", "--db=unix:"+c.Conf, "--timeout=10", "--columns=type", "find", "Interface", "type=geneve"), "geneve")
		}, c)
	}
	// OVS's userspace tunnelling learns the other node's underlay MAC by
	// ARP when it first has a packet to encapsulate for it, and drops that
	// packet: with an empty cache, a client's first SYN is lost to it
	// (docs/benchmarks.md, "cross-node wait"). Nodes that talk all the time
	// keep the entry; these two start with it.
	for _, p := range [][2]*OVNChassis{{o.A, o.B}, {o.B, o.A}} {
		mac := strings.TrimSpace(harness.MustRun(t, "ip", "netns", "exec", p[1].NS, "cat", "/sys/class/net/br-phy/address"))
		if out := p[0].Appctl("tnl/neigh/set", "br-phy", p[1].EncapIP, mac); !strings.Contains(out, "OK") {
			t.Fatalf("%s: tnl/neigh/set br-phy %s %s: %s", p[0].Name, p[1].EncapIP, mac, out)
		}
	}
	o.Nbctl("ls-add", o.Switch)
	return o
}

// ovnEnv points every OVS and OVN tool's run, database and log folders at
// dir, so that no system folder is touched.
func ovnEnv(dir string) []string {
	return append(os.Environ(), "OVS_RUNDIR="+dir, "OVS_DBDIR="+dir, "OVS_LOGDIR="+dir, "OVN_RUNDIR="+dir, "OVN_DBDIR="+dir, "OVN_LOGDIR="+dir)
}

func (o *TwoNodeOVN) startChassis(short, netns, encapIP string) *OVNChassis {
	t := o.t
	t.Helper()
	dir := filepath.Join(o.dir, short)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &OVNChassis{o: o, Name: "nr-chassis-" + short, NS: netns, Conf: filepath.Join(dir, "conf.sock"), EncapIP: encapIP, dir: dir, env: ovnEnv(dir)}
	o.nodes = append(o.nodes, c)
	harness.MustRun(t, "ip", "netns", "add", netns)
	harness.MustRun(t, "ip", "-n", netns, "link", "set", "lo", "up")
	o.startDB(dir, "conf", "/usr/share/openvswitch/vswitch.ovsschema", c.Conf, c.env)
	o.run(c.env, "ovs-vsctl", "--db=unix:"+c.Conf, "--no-wait", "init")
	// --disable-system-route: OVS's userspace tunnelling routes by its
	// own copy of the kernel's table, which it flushes and reloads on each
	// link change in the netns, such as a new pod's veth. Until the reload
	// the node neither terminates nor sends Geneve: a packet of the moment
	// goes to the kernel (ICMP port unreachable) or is dropped. The one
	// route the tunnels need is added by hand instead, and stays.
	o.start(c.env, short+"-vswitchd", "ip", "netns", "exec", netns, "ovs-vswitchd", "unix:"+c.Conf, "--no-chdir", "--disable-system-route",
		"--unixctl="+filepath.Join(dir, "vswitchd.ctl"), "--log-file="+filepath.Join(dir, "vswitchd.log"), "--pidfile="+filepath.Join(dir, "vswitchd.pid"))
	c.Vsctl("add-br", "br-int", "--", "set", "Bridge", "br-int", "datapath_type=netdev", "fail-mode=secure")
	// The encap IP goes on br-phy's own interface, not on the veth:
	// with it on the veth, OVS's native tunnel routing drops the packet.
	c.Vsctl("add-br", "br-phy", "--", "set", "Bridge", "br-phy", "datapath_type=netdev")
	harness.MustRun(t, "ip", "-n", netns, "addr", "add", encapIP+"/24", "dev", "br-phy")
	harness.MustRun(t, "ip", "-n", netns, "link", "set", "br-phy", "up")
	// The route takes its source address from br-phy, which ovs-vswitchd
	// learns from a netlink event of its own time.
	o.waitFor(10*time.Second, c.Name+"'s OVS route to the underlay", func() bool {
		return strings.Contains(c.Appctl("ovs/route/add", ovn2Underlay+"0/24", "br-phy"), "OK")
	}, nil)
	c.Vsctl("set", "Open_vSwitch", ".", "external_ids:system-id="+c.Name, "external_ids:ovn-remote=unix:"+o.SB,
		"external_ids:ovn-encap-type=geneve", "external_ids:ovn-encap-ip="+encapIP, "external_ids:ovn-bridge=br-int")
	c.controller = o.start(c.env, short+"-controller", "ip", "netns", "exec", netns, "ovn-controller", "unix:"+c.Conf, "--no-chdir",
		"--log-file="+filepath.Join(dir, "controller.log"), "--pidfile="+filepath.Join(dir, "controller.pid"))
	return c
}

// startDB creates a database from schema and serves it on sock.
func (o *TwoNodeOVN) startDB(dir, name, schema, sock string, env []string) {
	o.t.Helper()
	file := filepath.Join(dir, name+".db")
	harness.MustRun(o.t, "ovsdb-tool", "create", file, schema)
	o.start(env, name+"-ovsdb", "ovsdb-server", file, "--remote=punix:"+sock, "--unixctl="+filepath.Join(dir, name+".ctl"),
		"--no-chdir", "--log-file="+filepath.Join(dir, name+".log"), "--pidfile="+filepath.Join(dir, name+".pid"))
	o.waitFor(10*time.Second, sock+" to appear", func() bool { _, err := os.Stat(sock); return err == nil }, nil)
}

func (o *TwoNodeOVN) start(env []string, name string, argv ...string) *exec.Cmd {
	o.t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	logf, err := os.Create(filepath.Join(o.dir, name+".out"))
	if err != nil {
		o.t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		o.t.Fatalf("start %s: %v", name, err)
	}
	o.procs = append(o.procs, cmd)
	return cmd
}

func (o *TwoNodeOVN) run(env []string, argv ...string) string {
	o.t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		o.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func (o *TwoNodeOVN) output(env []string, argv ...string) string {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// waitFor polls cond, failing the test with c's log (if any) after limit.
func (o *TwoNodeOVN) waitFor(limit time.Duration, what string, cond func() bool, c *OVNChassis) {
	o.t.Helper()
	for start := time.Now(); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > limit {
			msg := ""
			if c != nil {
				msg = "; its ovn-controller:\n" + c.Log("controller")
			}
			o.t.Fatalf("waited %s for %s%s", limit, what, msg)
		}
	}
}

// Nbctl runs ovn-nbctl against the NB.
func (o *TwoNodeOVN) Nbctl(args ...string) string {
	o.t.Helper()
	return o.run(o.env, append([]string{"ovn-nbctl", "--db=unix:" + o.NB, "--timeout=10"}, args...)...)
}

// Sbctl runs ovn-sbctl against the SB and returns its output.
func (o *TwoNodeOVN) Sbctl(args ...string) string {
	return o.output(o.env, append([]string{"ovn-sbctl", "--db=unix:" + o.SB, "--timeout=10"}, args...)...)
}

// Vsctl runs ovs-vsctl against the node's own database.
func (c *OVNChassis) Vsctl(args ...string) string {
	c.o.t.Helper()
	return c.o.run(c.env, append([]string{"ovs-vsctl", "--db=unix:" + c.Conf, "--timeout=10"}, args...)...)
}

// Appctl runs ovs-appctl against the node's ovs-vswitchd.
func (c *OVNChassis) Appctl(args ...string) string {
	return c.o.output(c.env, append([]string{"ovs-appctl", "-t", filepath.Join(c.dir, "vswitchd.ctl"), "--timeout=10"}, args...)...)
}

// Log is the last lines of one of the node's daemon logs ("controller",
// "vswitchd").
func (c *OVNChassis) Log(name string) string {
	data, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	return harness.Tail(string(data), 30)
}

// Freeze stops (SIGSTOP) or continues (SIGCONT) the node's ovn-controller.
func (c *OVNChassis) Freeze(stop bool) {
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	if err := c.controller.Process.Signal(sig); err != nil {
		c.o.t.Errorf("signal %s's ovn-controller: %v", c.Name, err)
	}
}

// PodMAC is the MAC ovn-kubernetes gives a pod: 0a:58 and its IPv4 address.
func PodMAC(ip string) string {
	b := net.ParseIP(ip).To4()
	return fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

// AddPod does for a pod on node c what ovn-kubernetes does (its logical
// switch port in the NB, in the same transaction as extra ovn-nbctl
// commands, e.g. adding it to a port group), then the pod's veth, the
// node's end on br-int named by iface-id, and waits until c's
// ovn-controller has set ovn-installed. It returns the pod's netns path.
func (c *OVNChassis) AddPod(port, ip string, extra ...string) string {
	t := c.o.t
	t.Helper()
	pod := cnitest.NewNS(t)
	mac := PodMAC(ip)
	args := append([]string{"lsp-add", c.o.Switch, port, "--", "lsp-set-addresses", port, mac + " " + ip}, extra...)
	c.o.Nbctl(args...)
	host := "nrh" + harness.RandomHex(4)
	harness.MustRun(t, "ip", "-n", c.NS, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", filepath.Base(pod.Path()))
	harness.MustRun(t, "ip", "-n", c.NS, "link", "set", host, "up")
	podNS := filepath.Base(pod.Path())
	harness.MustRun(t, "ip", "-n", podNS, "link", "set", "eth0", "address", mac, "mtu", "1400")
	harness.MustRun(t, "ip", "-n", podNS, "addr", "add", ip+"/24", "dev", "eth0")
	harness.MustRun(t, "ip", "-n", podNS, "link", "set", "eth0", "up")
	harness.MustRun(t, "ip", "-n", podNS, "link", "set", "lo", "up")
	if err := ns.WithNetNSPath(pod.Path(), func(ns.NetNS) error { return TxChecksumOff("eth0") }); err != nil {
		t.Fatal(err)
	}
	c.Vsctl("add-port", "br-int", host, "--", "set", "Interface", host, "external_ids:iface-id="+port, "external_ids:attached_mac="+mac)
	c.o.waitFor(20*time.Second, port+" ovn-installed", func() bool {
		return strings.Contains(c.o.output(c.env, "ovs-vsctl", "--db=unix:"+c.Conf, "--timeout=10", "get", "Interface", host, "external_ids"), "ovn-installed")
	}, c)
	return pod.Path()
}

// TxChecksumOff is `ethtool -K name tx off` (ethtool is not installed
// here), in the caller's netns: OVS's userspace datapath forwards a veth's
// partial checksums as they are, and the receiver drops such TCP segments.
func TxChecksumOff(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	value := struct{ cmd, data uint32 }{cmd: unix.ETHTOOL_STXCSUM}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte
	}
	copy(ifr.name[:], name)
	ifr.data = unsafe.Pointer(&value)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return fmt.Errorf("ETHTOOL_STXCSUM off on %s: %w", name, errno)
	}
	return nil
}

// stop ends every process (continuing a frozen controller first), then
// removes both netns (which takes their links) and the folder.
func (o *TwoNodeOVN) stop() {
	for _, c := range o.nodes {
		if c.controller != nil {
			c.controller.Process.Signal(syscall.SIGCONT)
		}
	}
	if o.t.Failed() {
		for _, c := range o.nodes {
			o.t.Logf("%s ovn-controller log:\n%s", c.Name, c.Log("controller"))
		}
	}
	for i := len(o.procs) - 1; i >= 0; i-- {
		o.procs[i].Process.Kill()
		o.procs[i].Wait()
	}
	for _, c := range o.nodes {
		exec.Command("ip", "netns", "del", c.NS).Run()
	}
	os.RemoveAll(o.dir)
}
