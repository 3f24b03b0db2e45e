//go:build integration

package plugin

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestSoak: ADD/DEL/GC cycles through libcni, with ADDs killed (SIGKILL,
// as libcni does when its context ends) at random points, in whichever
// plugin of the chain is running, netready mid-wait and mid-write
// included; DELs repeated, some without a netns; GCs with the live
// attachments as keep-list. Afterwards: no marker without a live
// attachment, no temp file, no netns, link, netready process or file
// descriptor left, and no marker ever read back unparsable.
func TestSoak(t *testing.T) {
	cycles := 1000
	if v := os.Getenv("NETREADY_SOAK_CYCLES"); v != "" {
		cycles, _ = strconv.Atoi(v)
	}
	const workers = 4
	agentDir := t.TempDir()
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["timeout"] = "2s"
		n.Netready()["checks"] = []any{
			map[string]any{"kind": "address"}, map[string]any{"kind": "route"},
			map[string]any{"kind": "file", "path": agentDir + "/{{.ContainerID}}"},
		}
	})
	cni, list := n.Libcni()
	ctx := context.Background()

	// The first netns makes /run/netns a shared mount; testutils races if
	// concurrent first calls both do that.
	cnitest.NewNS(t)
	fdsBefore := countFDs(t)
	linksBefore := linkNames(t)
	netnsBefore := netnsCount()

	var (
		mu   sync.Mutex
		live = map[string]bool{} // attachments ADDed or being ADDed, not yet DELed
	)
	keepList := func() []types.GCAttachment {
		mu.Lock()
		defer mu.Unlock()
		var out []types.GCAttachment
		for cid := range live {
			out = append(out, types.GCAttachment{ContainerID: cid, IfName: "eth0"})
		}
		return out
	}
	var killed, added, failed, gcs, dels, unparsable atomic.Int64
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for {
				i := next.Add(1)
				if i > int64(cycles) || t.Failed() {
					return
				}
				cid := fmt.Sprintf("soak-%s-%05d", n.ID, i)
				netns, err := testutils.NewNS()
				if err != nil {
					t.Errorf("netns: %v", err)
					return
				}
				rt := &libcni.RuntimeConf{ContainerID: cid, NetNS: netns.Path(), IfName: "eth0"}
				mu.Lock()
				live[cid] = true
				mu.Unlock()
				// The agent programs the pod 0-40 ms after ADD starts.
				go func(d time.Duration) {
					time.Sleep(d)
					os.WriteFile(filepath.Join(agentDir, cid), nil, 0o644)
				}(time.Duration(rng.IntN(40)) * time.Millisecond)
				addCtx, cancel := ctx, context.CancelFunc(func() {})
				if rng.IntN(10) < 6 {
					addCtx, cancel = context.WithTimeout(ctx, time.Duration(1+rng.IntN(60))*time.Millisecond)
				}
				_, err = cni.AddNetworkList(addCtx, list, rt)
				wasKilled := addCtx.Err() != nil
				cancel()
				switch {
				case err == nil:
					added.Add(1)
				case wasKilled:
					killed.Add(1)
				default:
					failed.Add(1)
				}
				unparsable.Add(int64(readAllMarkers(n)))
				if rng.IntN(20) == 0 {
					if err := cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: keepList()}); err != nil {
						t.Errorf("GC: %v", err)
					}
					gcs.Add(1)
				}
				for d := 0; d <= rng.IntN(3); d++ {
					drt := rt
					if d > 0 && rng.IntN(2) == 0 {
						drt = &libcni.RuntimeConf{ContainerID: cid, IfName: "eth0"} // rmp: no netns
					}
					if err := cni.DelNetworkList(ctx, list, drt); err != nil {
						t.Errorf("DEL %s: %v", cid, err)
					}
					dels.Add(1)
				}
				mu.Lock()
				delete(live, cid)
				mu.Unlock()
				os.Remove(filepath.Join(agentDir, cid))
				netns.Close()
				if err := cnitest.UnmountNS(netns); err != nil {
					t.Errorf("unmount netns: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	// An explicit empty keep-list: a null one removes nothing.
	if err := cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}); err != nil {
		t.Errorf("final GC: %v", err)
	}

	markers, temps := 0, 0
	entries, _ := os.ReadDir(filepath.Join(n.StateDir, n.Name))
	for _, e := range entries {
		switch {
		case strings.HasPrefix(e.Name(), atomicfile.TempPrefix):
			temps++
		case strings.HasSuffix(e.Name(), ".json"):
			markers++
		}
	}
	ports := 0
	if br, err := netlink.LinkByName(n.Bridge); err == nil {
		all, _ := netlink.LinkList()
		for _, l := range all {
			if l.Attrs().MasterIndex == br.Attrs().Index {
				ports++
			}
		}
	}
	newLinks := 0
	for name := range linkNames(t) {
		if !linksBefore[name] && name != n.Bridge {
			newLinks++
		}
	}
	procs := pluginProcesses(t)
	fdsAfter := countFDs(t)
	ips := len(allocated(t, n))
	t.Logf("soak: %d cycles in %s (%d workers): %d ADDs done, %d killed, %d failed otherwise, %d DELs, %d GCs",
		cycles, elapsed.Round(time.Millisecond), workers, added.Load(), killed.Load(), failed.Load(), dels.Load(), gcs.Load())
	t.Logf("soak: left: %d markers, %d temp files, %d unparsable reads, %d netns, %d bridge ports, %d other new links, %d netready processes, %d fds (before %d), %d host-local IPs",
		markers, temps, unparsable.Load(), netnsCount()-netnsBefore, ports, newLinks, procs, fdsAfter-fdsBefore, fdsBefore, ips)
	fmt.Printf("soak: %d cycles (%d ADDs killed, %d completed, %d DELs, %d GCs): left %d markers, %d temp files, %d unparsable reads, %d netns, %d links, %d processes, %d more fds\n",
		cycles, killed.Load(), added.Load(), dels.Load(), gcs.Load(), markers, temps, unparsable.Load(), netnsCount()-netnsBefore, ports+newLinks, procs, max(0, fdsAfter-fdsBefore))
	if killed.Load() == 0 || added.Load() == 0 {
		t.Errorf("the soak killed %d ADDs and completed %d: it did not exercise both", killed.Load(), added.Load())
	}
	for what, got := range map[string]int{
		"markers": markers, "temp files": temps, "unparsable marker reads": int(unparsable.Load()),
		"netns": netnsCount() - netnsBefore, "bridge ports": ports, "new links": newLinks,
		"netready processes": procs, "file descriptors": fdsAfter - fdsBefore,
	} {
		if got > 0 {
			t.Errorf("left after the soak: %d %s", got, what)
		}
	}
}

// readAllMarkers reads every marker of the network and returns how many
// did not parse.
func readAllMarkers(n *cnitest.TestNet) int {
	bad := 0
	entries, _ := os.ReadDir(filepath.Join(n.StateDir, n.Name))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			if _, err := marker.ReadFile(filepath.Join(n.StateDir, n.Name, e.Name())); err != nil && !os.IsNotExist(err) && !strings.Contains(err.Error(), "no such file") {
				bad++
			}
		}
	}
	return bad
}

func countFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func linkNames(t *testing.T) map[string]bool {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range links {
		out[l.Attrs().Name] = true
	}
	return out
}

func netnsCount() int {
	entries, _ := os.ReadDir("/run/netns")
	return len(entries)
}

// pluginProcesses counts running processes of the netready binary.
func pluginProcesses(t *testing.T) int {
	t.Helper()
	want, _ := filepath.EvalSymlinks(filepath.Join(harness.BinDir, "netready"))
	procs, _ := os.ReadDir("/proc")
	n := 0
	for _, p := range procs {
		if exe, err := os.Readlink(filepath.Join("/proc", p.Name(), "exe")); err == nil && exe == want {
			n++
		}
	}
	return n
}
