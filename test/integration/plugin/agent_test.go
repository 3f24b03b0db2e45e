//go:build integration

package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestPolicySourcesWaitForAgent: ADD returns only after the agent has
// programmed every source: iptables, nftables, the Calico status file, and
// HTTP over TCP and a unix socket.
func TestPolicySourcesWaitForAgent(t *testing.T) {
	for _, tc := range []struct {
		file    string
		sources []string
	}{
		{"policy-agent.conflist", []string{"iptables", "nftables", "http"}},
		{"calico-style.conflist", []string{"file"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			n, agent := cnitest.NewAgentNet(t, tc.file, time.Second, nil)
			netns := cnitest.NewNS(t)
			cid := cnitest.ContainerID(netns.Path())
			agent.SetPod(cid, "default", "web-0", time.Second)
			start := time.Now()
			out, err := n.Add(netns.Path(), cnitest.PodArgs("default", "web-0"))
			if err != nil {
				t.Fatal(err)
			}
			returned := time.Now()
			ip := strings.Split(resultIPs(t, out)[0], "/")[0]
			m := n.ReadMarker(cid, "eth0")
			if m.State != marker.StateReady {
				t.Fatalf("marker state %s: %+v", m.State, m.Checks)
			}
			for _, src := range tc.sources {
				ev := agent.Visible(src, ip)
				began, vis := time.Unix(0, ev.BeganAt), time.Unix(0, ev.VisibleAt)
				if !vis.Before(returned) || m.ReadyAt.Before(began) {
					t.Errorf("agent programmed %s between %s and %s, but ADD detected readiness at %s and returned at %s",
						src, began.Format(time.StampMicro), vis.Format(time.StampMicro), m.ReadyAt.Format(time.StampMicro), returned.Format(time.StampMicro))
				}
			}
			if returned.Sub(start) < time.Second {
				t.Errorf("ADD returned after %s, before the agent's 1 s delay", returned.Sub(start))
			}
			kinds := map[string]int{}
			for _, c := range m.Checks {
				kinds[c.Kind]++
				if !c.Ready {
					t.Errorf("check %s %s not ready", c.Kind, c.Target)
				}
			}
			for _, src := range tc.sources {
				kind := src
				if kinds[kind] == 0 {
					t.Errorf("marker has no %s check: %+v", kind, m.Checks)
				}
			}
		})
	}
}

// TestPolicyTimeoutAndProceed: when the agent is slower than the timeout,
// "fail" returns code 11 naming each unmet check with its target, and
// "proceed" leaves a pending marker.
func TestPolicyTimeoutAndProceed(t *testing.T) {
	t.Run("fail", func(t *testing.T) {
		n, agent := cnitest.NewAgentNet(t, "policy-agent.conflist", time.Minute, func(n *cnitest.TestNet, _ map[string]any) {
			n.Netready()["timeout"] = "1s"
		})
		netns := cnitest.NewNS(t)
		agent.SetPod("slow-1", "default", "slow", time.Minute)
		cni, list := n.Libcni()
		rt := &libcni.RuntimeConf{ContainerID: "slow-1", NetNS: netns.Path(), IfName: "eth0"}
		t.Cleanup(func() { cni.DelNetworkList(context.Background(), list, rt) })
		start := time.Now()
		res, err := cni.AddNetworkList(context.Background(), list, rt)
		if cnitest.CNICode(err) != types.ErrTryAgainLater {
			t.Fatalf("ADD = %v, %v; want code 11", res, err)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("a 1s timeout took %s", time.Since(start))
		}
		var cerr *types.Error
		errors.As(err, &cerr)
		for _, want := range []string{
			"netready: timed out after 1s waiting for: ",
			fmt.Sprintf(`iptables iptables filter/%s contains "-s %s`, agent.Chain, n.Prefix),
			fmt.Sprintf("nftables set inet/%s/pods4 has %s", agent.Table, n.Prefix),
			"http http://" + agent.HTTP + "/ready?ip=" + n.Prefix,
			"http unix://" + agent.Sock + " /ready?ip=" + n.Prefix,
			"chain filter/" + agent.Chain + " does not exist (yet)",
			"set does not exist (yet)",
			"answered 503",
		} {
			if !strings.Contains(cerr.Msg, want) {
				t.Errorf("message lacks %q:\n%s", want, cerr.Msg)
			}
		}
		if _, err := os.Stat(n.MarkerPath("slow-1", "eth0")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("failed ADD left a marker")
		}
	})
	t.Run("proceed", func(t *testing.T) {
		n, agent := cnitest.NewAgentNet(t, "calico-style.conflist", time.Minute, func(n *cnitest.TestNet, _ map[string]any) {
			n.Netready()["timeout"] = "1s"
			n.Netready()["onTimeout"] = "proceed"
		})
		netns := cnitest.NewNS(t)
		cid := cnitest.ContainerID(netns.Path())
		agent.SetPod(cid, "default", "web-1", time.Minute)
		if _, err := n.Add(netns.Path(), cnitest.PodArgs("default", "web-1")); err != nil {
			t.Fatal(err)
		}
		m := n.ReadMarker(cid, "eth0")
		wantFile := filepath.Join(agent.Calico, "k8s default%2Fweb-1 eth0")
		if m.State != marker.StatePending || m.Pending == nil || m.Checks[2].Target != wantFile || m.Checks[2].Ready {
			t.Errorf("marker = %+v, want pending on the Calico file %q", m, wantFile)
		}
	})
}

// TestConcurrentAddsWaitInParallel: 50 ADDs whose pods the agent programs after
// different delays (0.1 s to 2.5 s) all finish in about the longest delay,
// not the sum (about 65 s): waits run in parallel, not one after another.
func TestConcurrentAddsWaitInParallel(t *testing.T) {
	const pods = 50
	n, agent := cnitest.NewAgentNet(t, "policy-agent.conflist", time.Second, func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["timeout"] = "60s"
	})
	type pod struct {
		ns    string
		delay time.Duration
	}
	var ps []pod
	var longest, sum time.Duration
	for i := 0; i < pods; i++ {
		netns := cnitest.NewNS(t)
		d := 100*time.Millisecond + time.Duration(i%25)*100*time.Millisecond
		agent.SetPod(cnitest.ContainerID(netns.Path()), "default", fmt.Sprintf("p%d", i), d)
		ps = append(ps, pod{netns.Path(), d})
		longest, sum = max(longest, d), sum+d
	}
	var wg sync.WaitGroup
	errs := make([]error, pods)
	start := time.Now()
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = n.Add(p.ns, cnitest.PodArgs("default", fmt.Sprintf("p%d", i)))
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Errorf("ADD %d: %v", i, err)
		}
	}
	for i, p := range ps {
		m := n.ReadMarker(cnitest.ContainerID(p.ns), "eth0")
		ip := strings.Split(m.IPs[0], "/")[0]
		// http is the agent's last step: every source was programmed by then.
		last := time.Unix(0, agent.Visible("http", ip).BeganAt)
		if m.State != marker.StateReady || m.ReadyAt.Before(last) {
			t.Errorf("pod %d (delay %s): state %s, ready at %s, before the agent finished at %s",
				i, p.delay, m.State, m.ReadyAt.Format(time.StampMicro), last.Format(time.StampMicro))
		}
	}
	// 50 plugin processes appended to one log file at once: every ADD's
	// record is there, once, whole.
	data, err := os.ReadFile(n.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	done := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if !strings.HasPrefix(line, "time=") || strings.Count(line, "time=") != 1 {
			t.Errorf("a log line is not one whole record: %q", line)
		}
		if strings.Contains(line, `msg="ADD done"`) {
			for _, p := range ps {
				if strings.Contains(line, "containerID="+cnitest.ContainerID(p.ns)+" ") {
					done[p.ns]++
				}
			}
		}
	}
	for i, p := range ps {
		if done[p.ns] != 1 {
			t.Errorf("ADD %d has %d \"ADD done\" log records, want 1", i, done[p.ns])
		}
	}
	t.Logf("50 concurrent ADDs: wall %s, longest delay %s, sum of delays %s", wall, longest, sum)
	if wall > longest+15*time.Second {
		t.Errorf("50 concurrent ADDs took %s; with parallel waits it should be near the longest delay %s (the sum is %s)", wall, longest, sum)
	}
}

// TestDeadlinesHold: a hanging HTTP endpoint or a held xtables lock never
// makes ADD overrun its timeout by more than a fraction of a second.
func TestDeadlinesHold(t *testing.T) {
	t.Run("hanging http endpoint", func(t *testing.T) {
		n, _ := cnitest.NewAgentNet(t, "policy-agent.conflist", time.Second, func(n *cnitest.TestNet, _ map[string]any) {
			n.Netready()["timeout"] = "1500ms"
		})
		n.Netready()["checks"] = []any{map[string]any{"kind": "http", "url": "http://" + strings.TrimPrefix(n.HTTPURL(), "http://") + "/hang"}}
		assertTimeoutWithin(t, n, 1500*time.Millisecond, "http http://")
	})
	t.Run("held xtables lock", func(t *testing.T) {
		// The nf_tables iptables takes no lock; the legacy one does. Put
		// iptables-legacy first on the plugin's PATH and hold its lock.
		legacy := t.TempDir()
		for _, c := range []string{"iptables", "ip6tables"} {
			if err := os.Symlink("/usr/sbin/"+c+"-legacy", filepath.Join(legacy, c)); err != nil {
				t.Fatal(err)
			}
		}
		n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
			n.Netready()["timeout"] = "1s"
			n.Netready()["checks"] = []any{map[string]any{"kind": "iptables", "chain": "NR-LOCKED", "match": "{{.IP}}"}}
		})
		ctx, cancel := context.WithCancel(context.Background())
		holder := exec.CommandContext(ctx, "flock", "/run/xtables.lock", "sleep", "30")
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); holder.Wait() })
		time.Sleep(200 * time.Millisecond)
		t.Setenv("PATH", legacy+":"+os.Getenv("PATH"))
		assertTimeoutWithin(t, n, time.Second, "iptables iptables filter/NR-LOCKED")
	})
}

// assertTimeoutWithin runs netready's ADD alone (the checks here do not
// look at the pod) and requires code 11 naming the check, no later than
// timeout plus a few hundred milliseconds.
func assertTimeoutWithin(t *testing.T, n *cnitest.TestNet, timeout time.Duration, names string) {
	t.Helper()
	start := time.Now()
	_, e := cnitest.Invoke(t, "ADD", n.PluginConf(cnitest.PrevResult100(n.Prefix+"5/24", n.Prefix+"1", "/var/run/netns/none")),
		"CNI_CONTAINERID=deadline-"+n.ID, "CNI_IFNAME=eth0", "CNI_NETNS=/var/run/netns/none")
	took := time.Since(start)
	if e == nil || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, names) {
		t.Fatalf("ADD = %+v, want code 11 naming %q", e, names)
	}
	t.Logf("ADD with a %s timeout returned after %s: %s", timeout, took, e.Msg)
	if took > timeout+700*time.Millisecond {
		t.Errorf("ADD took %s with a %s timeout: overran by more than 700 ms", took, timeout)
	}
}
