//go:build integration

package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/netready/netready/pkg/ovsdb"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/cnitest"
)

// BenchmarkPresetDetection: how long after the Cilium endpoint reaches its
// programmed state (stand-in agent), or after ovs-vsctl starts writing
// ovn-installed (real ovsdb-server), netready's ADD sees it (the marker's
// readyAt); beside a 200 ms polling loop watching the same in the same
// run. The ovn figure includes ovs-vsctl's own run time.
func BenchmarkPresetDetection(b *testing.B) {
	adds := 50
	if v, err := strconv.Atoi(os.Getenv("NETREADY_BENCH_ADDS")); err == nil {
		adds = min(v, 100)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var report []string

	sock := filepath.Join(b.TempDir(), "cilium.sock")
	agent := agents.StartCiliumAgent(b, sock, 40*time.Millisecond, -1)
	n := agents.CiliumNet(b, sock, "10s")
	pol := startPoller(ctx, func(id string) bool { return !time.Now().Before(agent.LastStageAt(id)) })
	var got, polled []time.Duration
	for i := 0; i < adds; i++ {
		rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("bc-%s-%d", n.ID, i), IfName: "eth0"}
		id := "cni-attachment-id:" + rt.ContainerID + ":eth0"
		pol.watch(id)
		m := benchAdd(b, n, rt)
		at := agent.LastStageAt(id)
		got = append(got, m.Sub(at))
		if p := pol.seenAt(id); !p.IsZero() {
			polled = append(polled, p.Sub(at))
		}
	}
	report = append(report, fmt.Sprintf("cilium preset (http, polled 2-50 ms): p50 %s p99 %s; 200 ms polling: p50 %s p99 %s",
		harness.Ms(harness.Percentile(got, .5)), harness.Ms(harness.Percentile(got, .99)), harness.Ms(harness.Percentile(polled, .5)), harness.Ms(harness.Percentile(polled, .99))))

	db := agents.StartOVSDB(b)
	n = agents.OVNNet(b, db.Sock, "10s")
	installed := func(cid string) bool {
		qctx, qcancel := context.WithTimeout(ctx, time.Second)
		defer qcancel()
		rows, err := ovsdb.Select(qctx, db.Sock, "Open_vSwitch", "Interface",
			[]any{[]any{"external_ids", "includes", []any{"map", [][2]string{{"sandbox", cid}}}}}, []string{"external_ids"})
		if err != nil || len(rows) == 0 {
			return false
		}
		v, _ := ovsdb.MapValue(rows[0]["external_ids"], "ovn-installed")
		return v == "true"
	}
	pol = startPoller(ctx, installed)
	got, polled = got[:0], polled[:0]
	var vsctl []time.Duration
	for i := 0; i < adds; i++ {
		rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("bo-%s-%d", n.ID, i), IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", fmt.Sprintf("p%d", i)}}}
		port := fmt.Sprintf("nrb%s%d", n.ID, i)
		db.AddPodPort(port, fmt.Sprintf("default_p%d", i), "uid", rt.ContainerID)
		pol.watch(rt.ContainerID)
		wrote := make(chan time.Time, 1)
		go func() {
			time.Sleep(100*time.Millisecond + rand.N(200*time.Millisecond))
			start := time.Now()
			db.Vsctl("set", "Interface", port, "external_ids:ovn-installed=true")
			vsctl = append(vsctl, time.Since(start))
			wrote <- start
		}()
		m := benchAdd(b, n, rt)
		at := <-wrote
		got = append(got, m.Sub(at))
		if p := pol.seenAt(rt.ContainerID); !p.IsZero() {
			polled = append(polled, p.Sub(at))
		}
	}
	report = append(report, fmt.Sprintf("ovn-kubernetes preset (OVSDB monitor): p50 %s p99 %s (ovs-vsctl itself p50 %s); 200 ms polling: p50 %s p99 %s",
		harness.Ms(harness.Percentile(got, .5)), harness.Ms(harness.Percentile(got, .99)), harness.Ms(harness.Percentile(vsctl, .5)), harness.Ms(harness.Percentile(polled, .5)), harness.Ms(harness.Percentile(polled, .99))))
	for _, r := range report {
		fmt.Println("preset detection:", r)
	}
}

// benchAdd runs one ADD and DEL through libcni and returns the marker's
// readyAt.
func benchAdd(b *testing.B, n *cnitest.TestNet, rt *libcni.RuntimeConf) time.Time {
	b.Helper()
	cni, list := n.Libcni()
	netns := cnitest.NewNS(b)
	rt.NetNS = netns.Path()
	if _, err := cni.AddNetworkList(context.Background(), list, rt); err != nil {
		b.Fatal(err)
	}
	m := n.ReadMarker(rt.ContainerID, "eth0")
	if err := cni.DelNetworkList(context.Background(), list, rt); err != nil {
		b.Fatal(err)
	}
	return m.ReadyAt.Time
}
