//go:build integration

package runtimes

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
	"github.com/netready/netready/test/harness/runtimes"
)

// verbLines are the plugin's log lines of verb for container id.
func verbLines(log, verb, id string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "verb="+verb+" ") && strings.Contains(l, "containerID="+id) {
			out = append(out, l)
		}
	}
	return out
}

// TestCRIOTakesEveryPathThroughNetready: netready under a real CRI-O 1.35, chained in by
// netready-install, on every path CRI-O takes through it: ADD holding
// runp then CHECK, CHECK of restored sandboxes on restart (passing, then
// failing with netready's message), GC at start-up, STATUS polled at
// start-up while runp waits, and stopp/rmp.
func TestCRIOTakesEveryPathThroughNetready(t *testing.T) {
	const delay = 1500 * time.Millisecond
	heartbeat := filepath.Join(t.TempDir(), "heartbeat")
	n, agent := cnitest.NewAgentNet(t, "crio.conflist", delay, func(n *cnitest.TestNet, list map[string]any) {
		n.Netready()["status"].(map[string]any)["agents"].([]any)[0].(map[string]any)["path"] = heartbeat
		// The stale heartbeat below must fail STATUS at once.
		n.Netready()["status"].(map[string]any)["failAfter"] = "0s"
	})
	hb := kube.StartHeartbeat(t, heartbeat)
	entry := n.ShipWithoutNetready()
	bin := cnitest.PluginDir(t, "bridge", "host-local", "loopback")
	cnitest.RunInstaller(t, "--conf-dir", n.ConfDir, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"), "--config", string(entry))
	// bridge's CHECK compares the bridge's MAC with the one ADD saw; a
	// bridge without a fixed MAC takes its lowest port's, which changes as
	// pods come and go. Real bridge-based plugins pin it the same way.
	for _, args := range [][]string{{"link", "add", n.Bridge, "type", "bridge"}, {"link", "set", n.Bridge, "address", "02:00:5e:10:00:01"}, {"link", "set", n.Bridge, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	c := runtimes.StartCRIO(t, n.ConfDir, bin, n.Name)
	// CRI-O polls STATUS every 500 ms until it first succeeds.
	harness.Eventually(t, "NetworkReady=true at start with a fresh heartbeat", func() (bool, string) { return c.NetworkReady() })
	var web0, web1 string

	t.Run("ADD holds runp, CHECK follows", func(t *testing.T) {
		c.T = t
		start := time.Now()
		id, err := c.RunPod("web-0")
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		web0 = id
		ip := c.PodIP(id)
		m := n.ReadMarker(id, "eth0")
		ev := agent.Visible("nftables", ip)
		if m.State != "ready" || m.ReadyAt.Before(time.Unix(0, ev.BeganAt)) || took < delay {
			t.Errorf("runp took %s, marker %s ready at %s; the agent programmed the pod at %s", took, m.State,
				m.ReadyAt.Format(time.StampMicro), time.Unix(0, ev.VisibleAt).Format(time.StampMicro))
		}
		if m.Pod.Name != "web-0" || m.Pod.Namespace != "default" || m.Pod.UID != "uid-web-0" {
			t.Errorf("marker pod = %+v, want default/web-0 from CRI-O's CNI_ARGS", m.Pod)
		}
		log := n.WaitNetreadyLog(t, 0, 10*time.Second, "CHECK done")
		if checks := verbLines(log, "CHECK", id); len(checks) != 1 || !strings.Contains(checks[0], "CHECK done: the marker matches") {
			t.Errorf("CHECK after ADD: %q", checks)
		}
		t.Logf("crio: runp held %s by netready's ADD (agent delay %s, ADD waited %d ms); CHECK right after passed", took.Round(time.Millisecond), delay, m.WaitedMs)
	})

	t.Run("CHECK on restart", func(t *testing.T) {
		c.T = t
		id, err := c.RunPod("web-1")
		if err != nil {
			t.Fatal(err)
		}
		web1 = id
		_, mark := n.NetreadyLog(0)
		c.Restart()
		log := n.WaitNetreadyLog(t, mark, 30*time.Second, "containerID="+web0, "containerID="+web1)
		for _, id := range []string{web0, web1} {
			if checks := verbLines(log, "CHECK", id); len(checks) != 1 || !strings.Contains(checks[0], "CHECK done") {
				t.Errorf("CHECK of restored sandbox %s: %q", id[:12], checks)
			}
		}
		if ip := c.PodIP(web0); ip == "" {
			t.Error("web-0 lost its IP over the restart")
		}

		// The host's route to the pods goes: CHECK must say so.
		gw := n.Prefix + "1"
		if out, err := exec.Command("ip", "route", "del", n.Subnet, "dev", n.Bridge).CombinedOutput(); err != nil {
			t.Fatalf("ip route del: %v %s", err, out)
		}
		restore := func() {
			exec.Command("ip", "route", "replace", n.Subnet, "dev", n.Bridge, "proto", "kernel", "scope", "link", "src", gw).Run()
		}
		defer restore()
		_, mark = n.NetreadyLog(0)
		crioMark := len(c.Log())
		c.Restart()
		log = n.WaitNetreadyLog(t, mark, 30*time.Second, "containerID="+web0, "containerID="+web1)
		checks := verbLines(log, "CHECK", web0)
		if len(checks) != 1 || !strings.Contains(checks[0], "no longer holds") {
			t.Errorf("CHECK with the route gone: %q", checks)
		}
		crioLog := c.WaitLog(crioMark, "Could not restore sandbox IP for "+web0, 30*time.Second)
		for _, l := range strings.Split(crioLog, "\n") {
			if strings.Contains(l, "Could not restore sandbox IP for "+web0) {
				if !strings.Contains(l, "netready: check route") {
					t.Errorf("CRI-O's log does not carry netready's message: %s", l)
				}
				t.Logf("crio: with the route gone, CRI-O logs: %s", l[max(0, strings.Index(l, "Could not")):])
			}
		}
		restore()
		c.Restart()
	})

	t.Run("GC at start-up", func(t *testing.T) {
		c.T = t
		pid := c.SandboxPID(web1)
		c.Stop()
		// A crash: web-1's pause process dies, its sandbox's config.json
		// is lost and libcni never cached its result, so CRI-O cannot
		// restore it and no DEL names it. Only GC can clean up after it.
		syscall.Kill(pid, syscall.SIGKILL)
		for _, p := range harness.ProcsMentioning(web1) {
			syscall.Kill(p, syscall.SIGKILL)
		}
		if err := os.Remove(filepath.Join(runtimes.CRIORoot, "storage", "vfs-containers", web1, "userdata", "config.json")); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join("/var/lib/cni/results", n.Name+"-"+web1+"-eth0"))
		_, mark := n.NetreadyLog(0)
		c.Start()
		log := n.WaitNetreadyLog(t, mark, 30*time.Second, "verb=GC")
		var gcs []string
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "verb=GC") && strings.Contains(l, "GC done") {
				gcs = append(gcs, l)
			}
		}
		if len(gcs) != 1 || !strings.Contains(gcs[0], "kept=1") || !strings.Contains(gcs[0], "removed=["+web1+"_eth0.json]") {
			t.Fatalf("GC at start-up: %q, want one GC keeping web-0's marker and removing web-1's", gcs)
		}
		gc := gcs[0]
		if _, err := os.Stat(n.MarkerPath(web1, "eth0")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("web-1's marker survived GC: %v", err)
		}
		if _, err := os.Stat(n.MarkerPath(web0, "eth0")); err != nil {
			t.Errorf("web-0's marker, a restored sandbox, was removed: %v", err)
		}
		if dels := verbLines(log, "DEL", web1); len(dels) != 0 {
			t.Errorf("a DEL named web-1, so GC proved nothing: %q", dels)
		}
		t.Logf("crio: GC at start-up: %s", gc[max(0, strings.Index(gc, "msg=")):])
	})

	var web2 string
	t.Run("STATUS at start-up", func(t *testing.T) {
		c.T = t
		c.Stop()
		hb.Paused.Store(true)
		old := time.Now().Add(-time.Minute)
		os.Chtimes(heartbeat, old, old)
		c.Start()
		var msg string
		harness.Eventually(t, "NetworkReady=false with netready's message", func() (bool, string) {
			var ok bool
			ok, msg = c.NetworkReady()
			return !ok && strings.Contains(msg, "netready") && strings.Contains(msg, "is stale"), msg
		})
		t.Logf("crio: with the heartbeat stale, crictl info: NetworkReady=false: %s", msg)
		_, mark := n.NetreadyLog(0)
		type result struct {
			id  string
			err error
		}
		done := make(chan result, 1)
		go func() {
			id, err := c.RunPod("web-2")
			done <- result{id, err}
		}()
		select {
		case r := <-done:
			t.Fatalf("runp finished (%v) while STATUS failed", r.err)
		case <-time.After(3 * time.Second):
		}
		if l, _ := n.NetreadyLog(mark); len(verbLines(l, "ADD", "")) != 0 {
			t.Errorf("an ADD ran while STATUS failed:\n%s", l)
		}
		refreshed := time.Now()
		hb.Paused.Store(false)
		os.Chtimes(heartbeat, refreshed, refreshed)
		var r result
		select {
		case r = <-done:
		case <-time.After(90 * time.Second):
			t.Fatal("runp did not finish after the heartbeat came back")
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		web2 = r.id
		t.Logf("crio: heartbeat refreshed; the waiting runp finished %.1fs later", time.Since(refreshed).Seconds())
		if m := n.ReadMarker(web2, "eth0"); m.State != "ready" {
			t.Errorf("web-2's marker: %+v", m)
		}
		if ok, msg := c.NetworkReady(); !ok {
			t.Errorf("NetworkReady still false: %s", msg)
		}
	})

	t.Run("stopp and rmp", func(t *testing.T) {
		c.T = t
		if web2 == "" {
			t.Fatal("the STATUS scenario made no web-2 to stop")
		}
		if _, err := c.Crictl("stopp", web2); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(n.MarkerPath(web2, "eth0")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("marker survived stopp: %v", err)
		}
		l, mark := n.NetreadyLog(0)
		if dels := verbLines(l, "DEL", web2); len(dels) != 1 {
			t.Errorf("DELs for web-2 after stopp: %q", dels)
		}
		if _, err := c.Crictl("rmp", web2); err != nil {
			t.Fatalf("rmp after stopp: %v", err)
		}
		if l, _ := n.NetreadyLog(mark); len(verbLines(l, "DEL", web2)) != 0 {
			t.Errorf("rmp called DEL again:\n%s", l)
		}
	})
	c.T = t
}
