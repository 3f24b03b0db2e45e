//go:build integration

package bench

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// BenchmarkAddOverhead: an attachment that is already programmed. netready
// (address and route checks) against the reference tuning plugin chained in
// the same place, each run 200 times interleaved on the same prevResult.
//
// Both binaries are installed the way netready-install installs the plugin
// (read whole, written with one write, so the page cache holds them alike),
// four copies of each, run in turn. How a binary came into the page cache
// moves its start-up by up to 10% here: from bin/ as go build wrote it,
// netready's start-up alone was 1.03-1.12x tuning's cached build; from
// tmpfs, 1.16x; installed alike on disk, 1.00-1.02x.
func BenchmarkAddOverhead(b *testing.B) {
	const runs, copies = 200, 4
	// Production keeps markers in /run/netready, a tmpfs, where fsync is
	// nearly free; this machine's /run and /tmp are on disk. Give both
	// plugins' state a tmpfs, as a node would. Binaries stay on disk, as
	// /opt/cni/bin is.
	state := b.TempDir()
	harness.MustRun(b, "mount", "-t", "tmpfs", "-o", "size=16m", "netready-bench", state)
	b.Cleanup(func() { harness.MustRun(b, "umount", state) })
	n := cnitest.NewNet(b, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}, map[string]any{"kind": "route"}}
	})
	n.Netready()["stateDir"] = filepath.Join(state, "netready")
	delete(n.Netready(), "logFile")
	netns := cnitest.NewNS(b)
	out, err := n.Add(netns.Path())
	if err != nil {
		b.Fatal(err)
	}
	netreadyConf := n.PluginConf([]byte(out))
	tuning := map[string]any{"cniVersion": "1.1.0", "name": n.Name, "type": "tuning", "dataDir": filepath.Join(state, "tuning"),
		"prevResult": json.RawMessage(out)}
	tuningConf, _ := json.Marshal(tuning)
	env := []string{"CNI_CONTAINERID=" + cnitest.ContainerID(netns.Path()), "CNI_IFNAME=eth0", "CNI_NETNS=" + netns.Path()}
	run := func(bin string, conf []byte) time.Duration {
		cmd := exec.Command(bin)
		cmd.Env = append([]string{"CNI_COMMAND=ADD", "CNI_PATH=" + harness.PluginPath}, env...)
		cmd.Stdin = strings.NewReader(string(conf))
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v %s", bin, err, out)
		}
		return time.Since(start)
	}
	bins := b.TempDir()
	netready := copyBinary(b, filepath.Join(harness.BinDir, "netready"), bins, copies)
	tuningBin := copyBinary(b, filepath.Join(harness.CNIBinDir, "tuning"), bins, copies)
	floor := copyBinary(b, floorBinary(b), bins, copies)
	noop := copyBinary(b, noopBinary(b), bins, copies)
	var nr, tu, fl, nrV, tuV, no []time.Duration
	for i := 0; i < runs; i++ {
		c := i % copies
		nr = append(nr, run(netready[c], netreadyConf))
		tu = append(tu, run(tuningBin[c], tuningConf))
		fl = append(fl, run(floor[c], netreadyConf))
		nrV = append(nrV, timeVersion(b, netready[c]))
		tuV = append(tuV, timeVersion(b, tuningBin[c]))
		no = append(no, timeVersion(b, noop[c]))
	}
	ratio := float64(harness.Percentile(nr, .5)) / float64(harness.Percentile(tu, .5))
	fmt.Printf("\nADD overhead when everything is already programmed (exec of the last plugin, %d runs each from %d copies on disk, interleaved, state on tmpfs)\n", runs, copies)
	fmt.Printf("  netready p50 %s p99 %s | tuning p50 %s p99 %s | ratio p50 %.2fx (goal <= 1.25x: %s)\n",
		harness.Ms(harness.Percentile(nr, .5)), harness.Ms(harness.Percentile(nr, .99)), harness.Ms(harness.Percentile(tu, .5)), harness.Ms(harness.Percentile(tu, .99)), ratio, verdict(ratio <= 1.25, nr, tu))
	for c := range copies {
		fmt.Printf("    copy %d: netready p50 %s | tuning p50 %s | ratio %.2fx\n", c+1,
			harness.Ms(harness.Percentile(everyNth(nr, c, copies), .5)), harness.Ms(harness.Percentile(everyNth(tu, c, copies), .5)),
			float64(harness.Percentile(everyNth(nr, c, copies), .5))/float64(harness.Percentile(everyNth(tu, c, copies), .5)))
	}
	fmt.Printf("  start alone (VERSION): netready p50 %s | tuning p50 %s | ratio %.2fx; a no-op Go binary p50 %s\n",
		harness.Ms(harness.Percentile(nrV, .5)), harness.Ms(harness.Percentile(tuV, .5)), float64(harness.Percentile(nrV, .5))/float64(harness.Percentile(tuV, .5)), harness.Ms(harness.Percentile(no, .5)))
	fmt.Printf("  floor: the same kernel work in a minimal Go program (test/cmd/floor: netns netlink socket, link and address lookups, route lookup, marker-sized file with fsync and rename) p50 %s | ratio to tuning %.2fx\n",
		harness.Ms(harness.Percentile(fl, .5)), float64(harness.Percentile(fl, .5))/float64(harness.Percentile(tu, .5)))
}

// copyBinary copies the executable src into dir n times and returns the
// copies' paths.
func copyBinary(b testing.TB, src, dir string, n int) []string {
	data, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	var out []string
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("%s.%d", filepath.Base(src), i+1))
		if err := os.WriteFile(p, data, 0o755); err != nil {
			b.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// everyNth returns xs[first], xs[first+n], ...
func everyNth(xs []time.Duration, first, n int) []time.Duration {
	var out []time.Duration
	for i := first; i < len(xs); i += n {
		out = append(out, xs[i])
	}
	return out
}

// floorBinary builds test/cmd/floor the way the plugin is built.
func floorBinary(b testing.TB) string {
	out := filepath.Join(b.TempDir(), "floor")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./test/cmd/floor")
	cmd.Dir, cmd.Env = "../../..", append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build test/cmd/floor: %v\n%s", err, msg)
	}
	return out
}

// noopBinary builds a Go program that does nothing, the floor of starting
// any Go binary on this machine.
func noopBinary(b testing.TB) string {
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module noop\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", "noop", ".")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build the no-op binary: %v\n%s", err, out)
	}
	return filepath.Join(dir, "noop")
}

// BenchmarkConcurrentWaitingAdds: 100 netready ADDs at once, each waiting
// on an nftables set element that appears 2 s later: wall time, and peak
// RSS per ADD process.
func BenchmarkConcurrentWaitingAdds(b *testing.B) {
	const adds = 100
	n := cnitest.NewNet(b, "bridge.conflist", nil)
	table := "nrc" + n.ID
	n.Netready()["checks"] = []any{map[string]any{"kind": "nftables", "family": "inet", "table": table, "set": "pods"}}
	n.Netready()["timeout"] = "60s"
	b.Cleanup(func() {
		if c, err := nftables.New(); err == nil {
			c.DelTable(&nftables.Table{Name: table, Family: nftables.TableFamilyINet})
			c.Flush()
		}
	})
	var wg sync.WaitGroup
	rss := make([]int64, adds)
	errs := make([]error, adds)
	pids := make(chan int, adds)
	start := time.Now()
	for i := 0; i < adds; i++ {
		ip := fmt.Sprintf("%s%d", n.Prefix, i+10)
		conf := n.PluginConf(cnitest.PrevResult100(ip+"/24", n.Prefix+"1", "/var/run/netns/none"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(filepath.Join(harness.BinDir, "netready"))
			cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_PATH=" + harness.PluginPath, "CNI_CONTAINERID=conc-" + fmt.Sprint(i),
				"CNI_IFNAME=eth0", "CNI_NETNS=/var/run/netns/none"}
			cmd.Stdin = strings.NewReader(string(conf))
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				errs[i] = err
				return
			}
			pids <- cmd.Process.Pid
			if err := cmd.Wait(); err != nil {
				errs[i] = fmt.Errorf("%v: %s", err, out.String())
			}
			rss[i] = cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	// While they wait: what each costs the node. RSS counts the binary's
	// text pages, which all of them share; PSS splits those among them.
	var pss, anon []int64
	for len(pids) > 0 {
		p, a := smapsRollup(<-pids)
		pss, anon = append(pss, p), append(anon, a)
	}
	time.Sleep(500 * time.Millisecond)
	programmed := time.Now()
	c, err := nftables.New()
	if err != nil {
		b.Fatal(err)
	}
	t := c.AddTable(&nftables.Table{Name: table, Family: nftables.TableFamilyINet})
	set := &nftables.Set{Table: t, Name: "pods", KeyType: nftables.TypeIPAddr}
	var elems []nftables.SetElement
	for i := 0; i < adds; i++ {
		elems = append(elems, nftables.SetElement{Key: net.ParseIP(fmt.Sprintf("%s%d", n.Prefix, i+10)).To4()})
	}
	if err := c.AddSet(set, elems); err != nil {
		b.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	wall := time.Since(start)
	for i, err := range errs {
		if err != nil {
			b.Errorf("ADD %d: %v", i, err)
		}
	}
	slices.Sort(rss)
	slices.Sort(pss)
	slices.Sort(anon)
	fmt.Println("\n100 concurrent waiting ADDs (nftables set, programmed 2 s after they started)")
	fmt.Printf("  wall %s (%s after programming) | peak RSS per ADD: median %.1f MB, max %.1f MB\n",
		wall.Round(time.Millisecond), time.Since(programmed).Round(time.Millisecond),
		float64(rss[adds/2])/1024, float64(rss[adds-1])/1024)
	fmt.Printf("  while waiting, per ADD: PSS median %.1f MB, max %.1f MB | anonymous median %.1f MB, max %.1f MB (n=%d)\n",
		float64(pss[len(pss)/2])/1024, float64(pss[len(pss)-1])/1024, float64(anon[len(anon)/2])/1024, float64(anon[len(anon)-1])/1024, len(pss))
}

// smapsRollup returns a process's PSS and anonymous memory in KB.
func smapsRollup(pid int) (pss, anon int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Pss:":
			pss = v
		case "Anonymous:":
			anon = v
		}
	}
	return pss, anon
}
