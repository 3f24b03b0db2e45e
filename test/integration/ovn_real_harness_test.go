//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// realOVN is a real OVN control plane and chassis in the test's own
// folders and sockets (Debian's ovn-central, ovn-host and openvswitch):
// the Open_vSwitch, NB and SB databases each in their own ovsdb-server,
// ovn-northd, ovs-vswitchd in a netns of its own with br-int on the
// userspace datapath (this kernel has no openvswitch module), and
// ovn-controller. No system OVS is touched.
type realOVN struct {
	t            testing.TB
	dir          string
	conf, nb, sb string // unix sockets
	vswitchdNS   string // the netns name ovs-vswitchd runs in
	controller   *exec.Cmd
	started      time.Duration // cold set-up time
	procs        []*exec.Cmd
	env          []string
}

func startRealOVN(t testing.TB) *realOVN {
	t.Helper()
	begin := time.Now()
	dir, err := os.MkdirTemp("", "nr-ovn-")
	if err != nil {
		t.Fatal(err)
	}
	o := &realOVN{t: t, dir: dir, conf: filepath.Join(dir, "conf.sock"), nb: filepath.Join(dir, "nb.sock"), sb: filepath.Join(dir, "sb.sock"),
		vswitchdNS: "nrovs-" + randomHex(3)}
	o.env = append(os.Environ(), "OVS_RUNDIR="+dir, "OVS_DBDIR="+dir, "OVS_LOGDIR="+dir, "OVN_RUNDIR="+dir, "OVN_DBDIR="+dir, "OVN_LOGDIR="+dir)
	t.Cleanup(o.stop)
	for _, db := range []struct{ name, schema, sock string }{
		{"conf", "/usr/share/openvswitch/vswitch.ovsschema", o.conf},
		{"nb", "/usr/share/ovn/ovn-nb.ovsschema", o.nb},
		{"sb", "/usr/share/ovn/ovn-sb.ovsschema", o.sb},
	} {
		file := filepath.Join(dir, db.name+".db")
		mustRun(t, "ovsdb-tool", "create", file, db.schema)
		o.start(db.name+"-ovsdb", "ovsdb-server", file, "--remote=punix:"+db.sock, "--unixctl="+filepath.Join(dir, db.name+".ctl"),
			"--no-chdir", "--log-file="+filepath.Join(dir, db.name+".log"), "--pidfile="+filepath.Join(dir, db.name+".pid"))
		o.waitFile(db.sock)
	}
	o.run("ovs-vsctl", "--db=unix:"+o.conf, "--no-wait", "init")
	o.run("ovn-nbctl", "--db=unix:"+o.nb, "init")
	o.run("ovn-sbctl", "--db=unix:"+o.sb, "init")
	mustRun(t, "ip", "netns", "add", o.vswitchdNS)
	o.start("ovs-vswitchd", "ip", "netns", "exec", o.vswitchdNS, "ovs-vswitchd", "unix:"+o.conf, "--no-chdir",
		"--unixctl="+filepath.Join(dir, "vswitchd.ctl"), "--log-file="+filepath.Join(dir, "vswitchd.log"), "--pidfile="+filepath.Join(dir, "vswitchd.pid"))
	o.vsctl("add-br", "br-int", "--", "set", "Bridge", "br-int", "datapath_type=netdev", "fail-mode=secure")
	o.vsctl("set", "Open_vSwitch", ".", "external_ids:system-id=nr-chassis", "external_ids:ovn-remote=unix:"+o.sb,
		"external_ids:ovn-encap-type=geneve", "external_ids:ovn-encap-ip=127.0.0.1", "external_ids:ovn-bridge=br-int")
	o.start("ovn-northd", "ovn-northd", "--ovnnb-db=unix:"+o.nb, "--ovnsb-db=unix:"+o.sb, "--no-chdir",
		"--unixctl="+filepath.Join(dir, "northd.ctl"), "--log-file="+filepath.Join(dir, "northd.log"), "--pidfile="+filepath.Join(dir, "northd.pid"))
	o.controller = o.start("ovn-controller", "ovn-controller", "unix:"+o.conf, "--no-chdir",
		"--log-file="+filepath.Join(dir, "controller.log"), "--pidfile="+filepath.Join(dir, "controller.pid"))
	// The chassis is up once it registered in the SB.
	for start := time.Now(); !strings.Contains(o.output("ovn-sbctl", "--db=unix:"+o.sb, "--columns=name", "list", "Chassis"), "nr-chassis"); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("ovn-controller never registered its chassis; its log:\n%s", o.log("controller"))
		}
	}
	o.nbctl("ls-add", "nr-node")
	o.started = time.Since(begin)
	return o
}

// start runs a daemon of the control plane; stop ends it.
func (o *realOVN) start(name string, argv ...string) *exec.Cmd {
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

func (o *realOVN) waitFile(path string) {
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

func (o *realOVN) run(argv ...string) string {
	o.t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = o.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		o.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func (o *realOVN) output(argv ...string) string {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = o.env
	out, _ := cmd.CombinedOutput()
	return string(out)
}

func (o *realOVN) vsctl(args ...string) string {
	o.t.Helper()
	return o.run(append([]string{"ovs-vsctl", "--db=unix:" + o.conf, "--timeout=10"}, args...)...)
}

func (o *realOVN) nbctl(args ...string) string {
	o.t.Helper()
	return o.run(append([]string{"ovn-nbctl", "--db=unix:" + o.nb, "--timeout=10"}, args...)...)
}

func (o *realOVN) log(name string) string {
	data, _ := os.ReadFile(filepath.Join(o.dir, name+".log"))
	return tail(string(data), 30)
}

// addPort does what ovn-kubernetes does for a pod: a logical switch port
// with its MAC and IP in the NB, and the pod's host-side interface on
// br-int with external_ids:iface-id naming it and sandbox naming the
// pod's sandbox. The interface is one end of a veth pair in ovs-vswitchd's
// netns (the pod's own veth is the main plugin's). ovn-controller, not
// the test, then sets ovn-installed on the Interface.
// It returns an error rather than fail the test: it runs beside a
// waiting ADD, in a goroutine of its own.
func (o *realOVN) addPort(port, ifaceID, mac, ip, sandbox, podUID string) error {
	for _, argv := range [][]string{
		{"ovn-nbctl", "--db=unix:" + o.nb, "--timeout=10", "--may-exist", "lsp-add", "nr-node", ifaceID, "--", "lsp-set-addresses", ifaceID, mac + " " + ip},
		{"ip", "-n", o.vswitchdNS, "link", "add", port, "type", "veth", "peer", "name", port + "p"},
		{"ip", "-n", o.vswitchdNS, "link", "set", port, "up"},
		{"ovs-vsctl", "--db=unix:" + o.conf, "--timeout=10", "--no-wait", "add-port", "br-int", port, "--", "set", "Interface", port,
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

// interfaceIDs returns an Interface's external_ids as ovs-vsctl prints them.
func (o *realOVN) interfaceIDs(port string) string {
	return o.output("ovs-vsctl", "--db=unix:"+o.conf, "--timeout=10", "get", "Interface", port, "external_ids")
}

// freeze stops (SIGSTOP) or continues (SIGCONT) ovn-controller.
func (o *realOVN) freeze(stop bool) {
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	if err := o.controller.Process.Signal(sig); err != nil {
		o.t.Fatal(err)
	}
}

func (o *realOVN) stop() {
	if o.controller != nil {
		o.controller.Process.Signal(syscall.SIGCONT)
	}
	for i := len(o.procs) - 1; i >= 0; i-- {
		o.procs[i].Process.Kill()
		o.procs[i].Wait()
	}
	exec.Command("ip", "netns", "del", o.vswitchdNS).Run()
	if o.t.Failed() {
		for _, n := range []string{"controller", "vswitchd", "northd"} {
			o.t.Logf("%s log:\n%s", n, o.log(n))
		}
	}
	os.RemoveAll(o.dir)
}
