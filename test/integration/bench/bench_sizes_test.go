//go:build integration

package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// BenchmarkBinarySizes: what `make build` produced, beside the reference
// tuning plugin and a no-op Go binary built the same way.
func BenchmarkBinarySizes(b *testing.B) {
	size := func(path string) float64 {
		info, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		return float64(info.Size()) / 1e6
	}
	plugin, sidecar := size(filepath.Join(harness.BinDir, "netready")), size(filepath.Join(harness.BinDir, "netready-sidecar"))
	fmt.Printf("\nBinary sizes: bin/netready %.1f MB (goal <= 8 MB: %s) | bin/netready-sidecar %.1f MB (goal <= 25 MB: %s) | tuning %.1f MB | a no-op Go binary %.1f MB\n",
		plugin, metOrMissed(plugin <= 8), sidecar, metOrMissed(sidecar <= 25), size(filepath.Join(harness.CNIBinDir, "tuning")), size(noopBinary(b)))
}

// BenchmarkNFTablesSetProbe: one probe of a set check against a set of
// 60,000 addresses (a cluster's pod IPs, as a policy agent may keep them),
// beside reading every element as the probe did before it looked up the one
// element, in the same run.
func BenchmarkNFTablesSetProbe(b *testing.B) {
	const size = 60000
	table := "nrbig" + harness.RandomHex(3)
	var script strings.Builder
	fmt.Fprintf(&script, "add table inet %[1]s\nadd set inet %[1]s pods { type ipv4_addr; }\nadd element inet %[1]s pods { 10.9.0.5", table)
	for i := range size - 1 {
		fmt.Fprintf(&script, ", 10.%d.%d.%d", 100+i/65536, (i/256)%256, i%256)
	}
	script.WriteString(" }\n")
	if err := cnitest.ApplyNFT(script.String()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", table).Run() })

	att := &attachment.Attachment{Network: "n", ContainerID: "c", IfName: "eth0",
		IPs: []attachment.IP{{Address: net.IPNet{IP: net.ParseIP("10.9.0.5").To4(), Mask: net.CIDRMask(24, 32)}}}}
	env := checks.NewEnv("")
	defer env.Close()
	cs, err := checks.Build([]config.CheckConf{{Kind: config.KindNFTables, Family: "inet", Table: table, Set: "pods"}}, att, env)
	if err != nil {
		b.Fatal(err)
	}
	var probe, dump []time.Duration
	for range 200 {
		start := time.Now()
		if ready, why, err := cs[0].Probe(context.Background()); !ready {
			b.Fatalf("probe: not ready: %s %v", why, err)
		}
		probe = append(probe, time.Since(start))
	}
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.CloseLasting()
	for range 20 {
		start := time.Now()
		set, err := conn.GetSetByName(&nftables.Table{Name: table, Family: nftables.TableFamilyINet}, "pods")
		if err != nil {
			b.Fatal(err)
		}
		elems, err := conn.GetSetElements(set)
		if err != nil || len(elems) != size {
			b.Fatalf("read %d elements of %d: %v", len(elems), size, err)
		}
		dump = append(dump, time.Since(start))
	}
	fmt.Printf("\nnftables set probe, a set of %d addresses: p50 %s, p99 %s | reading every element (the probe before): p50 %s | %.0fx less\n",
		size, harness.Ms(harness.Percentile(probe, .5)), harness.Ms(harness.Percentile(probe, .99)), harness.Ms(harness.Percentile(dump, .5)),
		float64(harness.Percentile(dump, .5))/float64(max(time.Microsecond, harness.Percentile(probe, .5))))
}
