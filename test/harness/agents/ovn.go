//go:build integration

// Package agents runs the real network agents the presets wait for: OVN
// (one chassis, or two nodes for the cross-node check) and Cilium, and
// Cilium's API faked on its socket.
package agents

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// RealOVN is a real OVN control plane and chassis in the test's own
// folders and sockets (Debian's ovn-central, ovn-host and openvswitch):
// the Open_vSwitch, NB and SB databases each in their own ovsdb-server,
// ovn-northd, ovs-vswitchd in a netns of its own with br-int on the
// userspace datapath (this kernel has no openvswitch module), and
// ovn-controller. No system OVS is touched.
type RealOVN struct {
	t            testing.TB
	dir          string
	Conf, NB, sb string // unix sockets
	VswitchdNS   string // the netns name ovs-vswitchd runs in
	controller   *exec.Cmd
	Started      time.Duration // cold set-up time
	procs        []*exec.Cmd
	env          []string
}

// StartRealOVN starts the OVN control plane and chassis, and stops them at
// cleanup.
func StartRealOVN(t testing.TB) *RealOVN {
	t.Helper()
	begin := time.Now()
	dir, err := os.MkdirTemp("", "nr-ovn-")
	if err != nil {
		t.Fatal(err)
	}
	o := &RealOVN{t: t, dir: dir, Conf: filepath.Join(dir, "conf.sock"), NB: filepath.Join(dir, "nb.sock"), sb: filepath.Join(dir, "sb.sock"),
		VswitchdNS: "nrovs-" + harness.RandomHex(3)}
	o.env = append(os.Environ(), "OVS_RUNDIR="+dir, "OVS_DBDIR="+dir, "OVS_LOGDIR="+dir, "OVN_RUNDIR="+dir, "OVN_DBDIR="+dir, "OVN_LOGDIR="+dir)
	t.Cleanup(o.stop)
	for _, db := range []struct{ name, schema, sock string }{
		{"conf", "/usr/share/openvswitch/vswitch.ovsschema", o.Conf},
		{"nb", "/usr/share/ovn/ovn-nb.ovsschema", o.NB},
		{"sb", "/usr/share/ovn/ovn-sb.ovsschema", o.sb},
	} {
		file := filepath.Join(dir, db.name+".db")
		harness.MustRun(t, "ovsdb-tool", "create", file, db.schema)
		o.start(db.name+"-ovsdb", "ovsdb-server", file, "--remote=punix:"+db.sock, "--unixctl="+filepath.Join(dir, db.name+".ctl"),
			"--no-chdir", "--log-file="+filepath.Join(dir, db.name+".log"), "--pidfile="+filepath.Join(dir, db.name+".pid"))
		o.waitFile(db.sock)
	}
	o.run("ovs-vsctl", "--db=unix:"+o.Conf, "--no-wait", "init")
	o.run("ovn-nbctl", "--db=unix:"+o.NB, "init")
	o.run("ovn-sbctl", "--db=unix:"+o.sb, "init")
	harness.MustRun(t, "ip", "netns", "add", o.VswitchdNS)
	o.start("ovs-vswitchd", "ip", "netns", "exec", o.VswitchdNS, "ovs-vswitchd", "unix:"+o.Conf, "--no-chdir",
		"--unixctl="+filepath.Join(dir, "vswitchd.ctl"), "--log-file="+filepath.Join(dir, "vswitchd.log"), "--pidfile="+filepath.Join(dir, "vswitchd.pid"))
	o.vsctl("add-br", "br-int", "--", "set", "Bridge", "br-int", "datapath_type=netdev", "fail-mode=secure")
	o.vsctl("set", "Open_vSwitch", ".", "external_ids:system-id=nr-chassis", "external_ids:ovn-remote=unix:"+o.sb,
		"external_ids:ovn-encap-type=geneve", "external_ids:ovn-encap-ip=127.0.0.1", "external_ids:ovn-bridge=br-int")
	o.start("ovn-northd", "ovn-northd", "--ovnnb-db=unix:"+o.NB, "--ovnsb-db=unix:"+o.sb, "--no-chdir",
		"--unixctl="+filepath.Join(dir, "northd.ctl"), "--log-file="+filepath.Join(dir, "northd.log"), "--pidfile="+filepath.Join(dir, "northd.pid"))
	o.controller = o.start("ovn-controller", "ovn-controller", "unix:"+o.Conf, "--no-chdir",
		"--log-file="+filepath.Join(dir, "controller.log"), "--pidfile="+filepath.Join(dir, "controller.pid"))
	// The chassis is up once it registered in the SB.
	for start := time.Now(); !strings.Contains(o.Output("ovn-sbctl", "--db=unix:"+o.sb, "--columns=name", "list", "Chassis"), "nr-chassis"); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("ovn-controller never registered its chassis; its log:\n%s", o.Log("controller"))
		}
	}
	o.Nbctl("ls-add", "nr-node")
	o.Started = time.Since(begin)
	return o
}

// start runs a daemon of the control plane; stop ends it.
func (o *RealOVN) start(name string, argv ...string) *exec.Cmd {
	o.t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = o.env
	logf, _ := os.Create(filepath.Join(o.dir, name+".out"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		o.t.Fatalf("start %s: %v", name, err)
	}
	o.procs = append(o.procs, cmd)
	return cmd
}

func (o *RealOVN) waitFile(path string) {
	o.t.Helper()
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Since(start) > 10*time.Second {
			o.t.Fatalf("%s never appeared", path)
		}
	}
}

func (o *RealOVN) run(argv ...string) string {
	o.t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = o.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		o.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// Output runs a command with the OVN environment and returns its output.
func (o *RealOVN) Output(argv ...string) string {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = o.env
	out, _ := cmd.CombinedOutput()
	return string(out)
}

func (o *RealOVN) vsctl(args ...string) string {
	o.t.Helper()
	return o.run(append([]string{"ovs-vsctl", "--db=unix:" + o.Conf, "--timeout=10"}, args...)...)
}

// Nbctl runs ovn-nbctl against the test's northbound database.
func (o *RealOVN) Nbctl(args ...string) string {
	o.t.Helper()
	return o.run(append([]string{"ovn-nbctl", "--db=unix:" + o.NB, "--timeout=10"}, args...)...)
}

// Log is the last lines of one daemon's log.
func (o *RealOVN) Log(name string) string {
	data, _ := os.ReadFile(filepath.Join(o.dir, name+".log"))
	return harness.Tail(string(data), 30)
}

// AddPort does what ovn-kubernetes does for a pod: a logical switch port
// with its MAC and IP in the NB, and the pod's host-side interface on
// br-int with external_ids:iface-id naming it and sandbox naming the
// pod's sandbox. The interface is one end of a veth pair in ovs-vswitchd's
// netns (the pod's own veth is the main plugin's). ovn-controller, not
// the test, then sets ovn-installed on the Interface.
// It returns an error rather than fail the test: it runs beside a
// waiting ADD, in a goroutine of its own.
func (o *RealOVN) AddPort(port, ifaceID, mac, ip, sandbox, podUID string) error {
	for _, argv := range [][]string{
		{"ovn-nbctl", "--db=unix:" + o.NB, "--timeout=10", "--may-exist", "lsp-add", "nr-node", ifaceID, "--", "lsp-set-addresses", ifaceID, mac + " " + ip},
		{"ip", "-n", o.VswitchdNS, "link", "add", port, "type", "veth", "peer", "name", port + "p"},
		{"ip", "-n", o.VswitchdNS, "link", "set", port, "up"},
		{"ovs-vsctl", "--db=unix:" + o.Conf, "--timeout=10", "--no-wait", "add-port", "br-int", port, "--", "set", "Interface", port,
			"external_ids:iface-id=" + ifaceID, "external_ids:attached_mac=" + mac, "external_ids:iface-id-ver=" + podUID, "external_ids:sandbox=" + sandbox},
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = o.env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, out)
		}
	}
	return nil
}

// InterfaceIDs returns an Interface's external_ids as ovs-vsctl prints them.
func (o *RealOVN) InterfaceIDs(port string) string {
	return o.Output("ovs-vsctl", "--db=unix:"+o.Conf, "--timeout=10", "get", "Interface", port, "external_ids")
}

// Freeze stops (SIGSTOP) or continues (SIGCONT) ovn-controller.
func (o *RealOVN) Freeze(stop bool) {
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	if err := o.controller.Process.Signal(sig); err != nil {
		o.t.Fatal(err)
	}
}

func (o *RealOVN) stop() {
	if o.controller != nil {
		o.controller.Process.Signal(syscall.SIGCONT)
	}
	for i := len(o.procs) - 1; i >= 0; i-- {
		o.procs[i].Process.Kill()
		o.procs[i].Wait()
	}
	exec.Command("ip", "netns", "del", o.VswitchdNS).Run()
	if o.t.Failed() {
		for _, n := range []string{"controller", "vswitchd", "northd"} {
			o.t.Logf("%s log:\n%s", n, o.Log(n))
		}
	}
	os.RemoveAll(o.dir)
}

// OVSMapValue returns one key's value from ovs-vsctl's map output.
func OVSMapValue(ids, key string) string {
	i := strings.Index(ids, key+"=")
	if i < 0 {
		return ""
	}
	v := ids[i+len(key)+1:]
	v = strings.TrimPrefix(v, `"`)
	if j := strings.IndexAny(v, `",}`); j >= 0 {
		v = v[:j]
	}
	return v
}

// OVSDBServer is a real ovsdb-server (Debian's openvswitch-switch) with the
// Open_vSwitch schema, on a private socket, and an empty br-int; no
// ovs-vswitchd runs, as --no-wait writes need none.
type OVSDBServer struct {
	T    testing.TB
	Sock string
}

// StartOVSDB starts the ovsdb-server, and stops it at cleanup.
func StartOVSDB(t testing.TB) *OVSDBServer {
	t.Helper()
	dir := t.TempDir()
	db := filepath.Join(dir, "conf.db")
	harness.MustRun(t, "ovsdb-tool", "create", db, "/usr/share/openvswitch/vswitch.ovsschema")
	s := &OVSDBServer{T: t, Sock: filepath.Join(dir, "db.sock")}
	cmd := exec.Command("ovsdb-server", db, "--remote=punix:"+s.Sock, "--unixctl="+filepath.Join(dir, "ovsdb.ctl"), "--no-chdir",
		"--log-file="+filepath.Join(dir, "ovsdb-server.log"), "--pidfile="+filepath.Join(dir, "ovsdb-server.pid"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(s.Sock); err == nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("ovsdb-server did not create its socket")
		}
	}
	s.Vsctl("init")
	s.Vsctl("add-br", "br-int")
	return s
}

// Vsctl runs ovs-vsctl against this server.
func (s *OVSDBServer) Vsctl(args ...string) {
	s.T.Helper()
	harness.MustRun(s.T, "ovs-vsctl", append([]string{"--db=unix:" + s.Sock, "--no-wait", "--timeout=10"}, args...)...)
}

// AddPodPort does what ovn-kubernetes' CNI does for a pod (ConfigureOVS).
func (s *OVSDBServer) AddPodPort(name, ifaceID, podUID, sandbox string) {
	s.Vsctl("add-port", "br-int", name, "--", "set", "Interface", name,
		"external_ids:attached_mac=0a:58:0a:c8:00:05", "external_ids:iface-id="+ifaceID,
		"external_ids:iface-id-ver="+podUID, "external_ids:sandbox="+sandbox)
}

// OVNNet is conflists/ovn-kubernetes.conflist with ovn-kubernetes' own CNI
// (which cannot run here) replaced by bridge + host-local, and the preset
// pointed at the test's database.
func OVNNet(t testing.TB, sock, timeout string) *cnitest.TestNet {
	return cnitest.NewNet(t, "ovn-kubernetes.conflist", func(n *cnitest.TestNet, list map[string]any) {
		chain := list["plugins"].([]any)
		chain[0] = map[string]any{"type": "bridge", "bridge": n.Bridge, "isGateway": true, "ipMasq": false,
			"ipam": map[string]any{"type": "host-local", "ranges": []any{[]any{map[string]any{"subnet": n.Subnet}}}, "dataDir": t.TempDir()}}
		n.Netready()["timeout"] = timeout
		n.Netready()["checks"].([]any)[2].(map[string]any)["socket"] = sock
	})
}
