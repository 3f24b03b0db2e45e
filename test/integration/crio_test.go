//go:build integration

package integration

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// netreadyLog is the plugin's log from offset on, and its length.
func (n *testNet) netreadyLog(from int) (string, int) {
	data, _ := os.ReadFile(n.LogFile)
	if from > len(data) {
		from = len(data)
	}
	return string(data[from:]), len(data)
}

// waitNetreadyLog waits until every want occurs in the plugin's log after
// offset from.
func (n *testNet) waitNetreadyLog(t *testing.T, from int, limit time.Duration, want ...string) string {
	t.Helper()
	var l string
	for start := time.Now(); time.Since(start) < limit; time.Sleep(100 * time.Millisecond) {
		l, _ = n.netreadyLog(from)
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			return l
		}
	}
	t.Fatalf("netready log: not all of %q within %s:\n%s", want, limit, tail(l, 30))
	return ""
}

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

// sandboxPID is the pause process of a pod sandbox.
func (c *crio) sandboxPID(id string) int {
	c.t.Helper()
	out, err := c.crictl("inspectp", "-o", "json", id)
	if err != nil {
		c.t.Fatal(err)
	}
	var v struct {
		Info struct {
			PID int `json:"pid"`
		} `json:"info"`
	}
	json.Unmarshal([]byte(out), &v)
	if v.Info.PID == 0 {
		c.t.Fatalf("no pid in crictl inspectp %s", id)
	}
	return v.Info.PID
}

// TestCRIO: netready under a real CRI-O 1.35, chained in by
// netready-install, on every path CRI-O takes through it: ADD holding
// runp then CHECK, CHECK of restored sandboxes on restart (passing, then
// failing with netready's message), GC at start-up, STATUS polled at
// start-up while runp waits, and stopp/rmp.
func TestCRIO(t *testing.T) {
	const delay = 1500 * time.Millisecond
	heartbeat := filepath.Join(t.TempDir(), "heartbeat")
	n, agent := newAgentNet(t, "crio.conflist", delay, func(n *testNet, list map[string]any) {
		n.Netready()["status"].(map[string]any)["agents"].([]any)[0].(map[string]any)["path"] = heartbeat
		// The stale heartbeat below must fail STATUS at once.
		n.Netready()["status"].(map[string]any)["failAfter"] = "0s"
	})
	hb := startHeartbeat(t, heartbeat)
	entry := n.shipWithoutNetready()
	bin := pluginDir(t, "bridge", "host-local", "loopback")
	runInstaller(t, "--conf-dir", n.ConfDir, "--bin-dir", bin, "--plugin-binary", filepath.Join(binDir, "netready"), "--config", string(entry))
	// bridge's CHECK compares the bridge's MAC with the one ADD saw; a
	// bridge without a fixed MAC takes its lowest port's, which changes as
	// pods come and go. Real bridge-based plugins pin it the same way.
	for _, args := range [][]string{{"link", "add", n.Bridge, "type", "bridge"}, {"link", "set", n.Bridge, "address", "02:00:5e:10:00:01"}, {"link", "set", n.Bridge, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	c := startCRIO(t, n.ConfDir, bin, n.Name)
	// CRI-O polls STATUS every 500 ms until it first succeeds.
	eventually(t, "NetworkReady=true at start with a fresh heartbeat", func() (bool, string) { return c.networkReady() })
	var web0, web1 string

	t.Run("ADD holds runp, CHECK follows", func(t *testing.T) {
		c.t = t
		start := time.Now()
		id, err := c.runPod("web-0")
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		web0 = id
		ip := c.podIP(id)
		m := n.readMarker(id, "eth0")
		ev := agent.visible("nftables", ip)
		if m.State != "ready" || m.ReadyAt.Before(time.Unix(0, ev.BeganAt)) || took < delay {
			t.Errorf("runp took %s, marker %s ready at %s; the agent programmed the pod at %s", took, m.State,
				m.ReadyAt.Format(time.StampMicro), time.Unix(0, ev.VisibleAt).Format(time.StampMicro))
		}
		if m.Pod.Name != "web-0" || m.Pod.Namespace != "default" || m.Pod.UID != "uid-web-0" {
			t.Errorf("marker pod = %+v, want default/web-0 from CRI-O's CNI_ARGS", m.Pod)
		}
		log := n.waitNetreadyLog(t, 0, 10*time.Second, "CHECK done")
		if checks := verbLines(log, "CHECK", id); len(checks) != 1 || !strings.Contains(checks[0], "CHECK done: the marker matches") {
			t.Errorf("CHECK after ADD: %q", checks)
		}
		t.Logf("crio: runp held %s by netready's ADD (agent delay %s, ADD waited %d ms); CHECK right after passed", took.Round(time.Millisecond), delay, m.WaitedMs)
	})

	t.Run("CHECK on restart", func(t *testing.T) {
		c.t = t
		id, err := c.runPod("web-1")
		if err != nil {
			t.Fatal(err)
		}
		web1 = id
		_, mark := n.netreadyLog(0)
		c.restart()
		log := n.waitNetreadyLog(t, mark, 30*time.Second, "containerID="+web0, "containerID="+web1)
		for _, id := range []string{web0, web1} {
			if checks := verbLines(log, "CHECK", id); len(checks) != 1 || !strings.Contains(checks[0], "CHECK done") {
				t.Errorf("CHECK of restored sandbox %s: %q", id[:12], checks)
			}
		}
		if ip := c.podIP(web0); ip == "" {
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
		_, mark = n.netreadyLog(0)
		crioMark := len(c.log())
		c.restart()
		log = n.waitNetreadyLog(t, mark, 30*time.Second, "containerID="+web0, "containerID="+web1)
		checks := verbLines(log, "CHECK", web0)
		if len(checks) != 1 || !strings.Contains(checks[0], "no longer holds") {
			t.Errorf("CHECK with the route gone: %q", checks)
		}
		crioLog := c.waitLog(crioMark, "Could not restore sandbox IP for "+web0, 30*time.Second)
		for _, l := range strings.Split(crioLog, "\n") {
			if strings.Contains(l, "Could not restore sandbox IP for "+web0) {
				if !strings.Contains(l, "netready: check route") {
					t.Errorf("CRI-O's log does not carry netready's message: %s", l)
				}
				t.Logf("crio: with the route gone, CRI-O logs: %s", l[max(0, strings.Index(l, "Could not")):])
			}
		}
		restore()
		c.restart()
	})

	t.Run("GC at start-up", func(t *testing.T) {
		c.t = t
		pid := c.sandboxPID(web1)
		c.stop()
		// A crash: web-1's pause process dies, its sandbox's config.json
		// is lost and libcni never cached its result, so CRI-O cannot
		// restore it and no DEL names it. Only GC can clean up after it.
		syscall.Kill(pid, syscall.SIGKILL)
		for _, p := range procsMentioning(web1) {
			syscall.Kill(p, syscall.SIGKILL)
		}
		if err := os.Remove(filepath.Join(crioRoot, "storage", "vfs-containers", web1, "userdata", "config.json")); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join("/var/lib/cni/results", n.Name+"-"+web1+"-eth0"))
		_, mark := n.netreadyLog(0)
		c.start()
		log := n.waitNetreadyLog(t, mark, 30*time.Second, "verb=GC")
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
		if _, err := os.Stat(n.markerPath(web1, "eth0")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("web-1's marker survived GC: %v", err)
		}
		if _, err := os.Stat(n.markerPath(web0, "eth0")); err != nil {
			t.Errorf("web-0's marker, a restored sandbox, was removed: %v", err)
		}
		if dels := verbLines(log, "DEL", web1); len(dels) != 0 {
			t.Errorf("a DEL named web-1, so GC proved nothing: %q", dels)
		}
		t.Logf("crio: GC at start-up: %s", gc[max(0, strings.Index(gc, "msg=")):])
	})

	var web2 string
	t.Run("STATUS at start-up", func(t *testing.T) {
		c.t = t
		c.stop()
		hb.paused.Store(true)
		old := time.Now().Add(-time.Minute)
		os.Chtimes(heartbeat, old, old)
		c.start()
		var msg string
		eventually(t, "NetworkReady=false with netready's message", func() (bool, string) {
			var ok bool
			ok, msg = c.networkReady()
			return !ok && strings.Contains(msg, "netready") && strings.Contains(msg, "is stale"), msg
		})
		t.Logf("crio: with the heartbeat stale, crictl info: NetworkReady=false: %s", msg)
		_, mark := n.netreadyLog(0)
		type result struct {
			id  string
			err error
		}
		done := make(chan result, 1)
		go func() {
			id, err := c.runPod("web-2")
			done <- result{id, err}
		}()
		select {
		case r := <-done:
			t.Fatalf("runp finished (%v) while STATUS failed", r.err)
		case <-time.After(3 * time.Second):
		}
		if l, _ := n.netreadyLog(mark); len(verbLines(l, "ADD", "")) != 0 {
			t.Errorf("an ADD ran while STATUS failed:\n%s", l)
		}
		refreshed := time.Now()
		hb.paused.Store(false)
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
		if m := n.readMarker(web2, "eth0"); m.State != "ready" {
			t.Errorf("web-2's marker: %+v", m)
		}
		if ok, msg := c.networkReady(); !ok {
			t.Errorf("NetworkReady still false: %s", msg)
		}
	})

	t.Run("stopp and rmp", func(t *testing.T) {
		c.t = t
		if web2 == "" {
			t.Fatal("the STATUS scenario made no web-2 to stop")
		}
		if _, err := c.crictl("stopp", web2); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(n.markerPath(web2, "eth0")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("marker survived stopp: %v", err)
		}
		l, mark := n.netreadyLog(0)
		if dels := verbLines(l, "DEL", web2); len(dels) != 1 {
			t.Errorf("DELs for web-2 after stopp: %q", dels)
		}
		if _, err := c.crictl("rmp", web2); err != nil {
			t.Fatalf("rmp after stopp: %v", err)
		}
		if l, _ := n.netreadyLog(mark); len(verbLines(l, "DEL", web2)) != 0 {
			t.Errorf("rmp called DEL again:\n%s", l)
		}
	})
	c.t = t
}
