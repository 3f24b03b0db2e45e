//go:build integration

package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/pkg/pool/calico"
	"github.com/netready/netready/pkg/pool/calico/calicotest"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// BenchmarkCalicoIPAMWatch5000Blocks: what watching Calico IPAM costs a
// sidecar in a cluster of 5,000 blocks (500 nodes of 10 /26 blocks, each
// block 40 of 64 addresses allocated, one attribute per pod, as
// calico-ipam writes them): the heap and RSS the watcher adds once it has
// listed everything (goal: RSS 10 MB or less), and the LIST requests the
// API server serves for Calico's kinds over a minute after that (goal: 0,
// no periodic relist).
func BenchmarkCalicoIPAMWatch5000Blocks(b *testing.B) {
	const nodes, perNode, used = 500, 10, 40
	a := kube.StartAPIServer(b)
	for _, args := range [][]string{
		{"apply", "-f", harness.RepoPath("test", "fixtures", "calico", "crds.yaml")},
		{"wait", "--for=condition=Established", "--timeout=60s", "crd/ipamblocks.crd.projectcalico.org", "crd/blockaffinities.crd.projectcalico.org", "crd/ipamconfigs.crd.projectcalico.org", "crd/ippools.crd.projectcalico.org"},
		{"apply", "-f", harness.RepoPath("deploy", "components", "calico", "rbac.yaml")},
	} {
		if out, err := a.KubectlRun(args...); err != nil {
			b.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := a.Config(kube.AdminToken)
	cfg.QPS, cfg.Burst = 2000, 2000
	dyn := dynamic.NewForConfigOrDie(cfg)
	w := calicotest.Writer{Dynamic: dyn}
	if err := w.SetPool(ctx, calicotest.Pool{Name: "default-ipv4-ippool", CIDR: "10.0.0.0/12", BlockSize: 26}); err != nil {
		b.Fatal(err)
	}
	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	blocks := make(chan int)
	var wg sync.WaitGroup
	var failed sync.Once
	for range 64 {
		wg.Go(func() {
			for i := range blocks {
				if err := createBlock(ctx, dyn, fmt.Sprintf("node-%d", i/perNode), i, used); err != nil {
					failed.Do(func() { b.Error(err) })
				}
			}
		})
	}
	for i := range nodes * perNode {
		blocks <- i
	}
	close(blocks)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	b.Logf("created %d blocks and affinities in %s", nodes*perNode, time.Since(start).Round(time.Second))

	heap0, rss0 := footprint()
	b.ResetTimer()
	cw := calico.New(calico.Options{Dynamic: dynamic.NewForConfigOrDie(a.AgentConfig), Node: "node-0"})
	go cw.Run(ctx)
	synced := time.Now()
	for c := cw.Count(ctx, pool.Scope{IPv4: true}); c.Unknown != ""; c = cw.Count(ctx, pool.Scope{IPv4: true}) {
		if time.Since(synced) > 2*time.Minute {
			b.Fatalf("not synced within 2 minutes: %s", c.Unknown)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.StopTimer()
	c := cw.Count(ctx, pool.Scope{IPv4: true})
	b.Logf("synced in %s: %s", time.Since(synced).Round(time.Millisecond), c.Said)
	if r, _ := c.Tightest(); r.Usable.Int64() != perNode*64 || r.Used != perNode*used {
		b.Errorf("node-0: want %d of %d in use, got %+v", perNode*used, perNode*64, r)
	}
	heap1, rss1 := footprint()
	b.ReportMetric(float64(heap1-heap0)/(1<<20), "heap-MB")
	b.ReportMetric(float64(rss1-rss0)/(1<<20), "rss-MB")
	if rss1-rss0 > 10<<20 {
		b.Errorf("the watcher added %.1f MB of RSS; the goal is 10 MB", float64(rss1-rss0)/(1<<20))
	}

	// No periodic LIST: the API server's count of LISTs of Calico's kinds
	// does not move over a minute of watching.
	lists := func() int {
		raw, err := a.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return kube.SumSeries(string(raw), "apiserver_request_total", `verb="LIST"`, `group="crd.projectcalico.org"`)
	}
	before := lists()
	time.Sleep(time.Minute)
	after := lists()
	b.ReportMetric(float64(after-before), "lists/min")
	if after != before {
		b.Errorf("%d LISTs of Calico's kinds in a minute after sync; want none (resync must be off)", after-before)
	}
	runtime.KeepAlive(cw)
}

// createBlock writes block i (a /26 of 10.0.0.0/12) for node with used
// addresses allocated, and its confirmed affinity, as calico-ipam would
// after assigning them.
func createBlock(ctx context.Context, dyn dynamic.Interface, node string, i, used int) error {
	base := netip.MustParseAddr("10.0.0.0").As4()
	n := uint32(base[0])<<24 | uint32(i)<<6
	p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), 26)
	allocs, unalloc, attrs := make([]any, 64), []any{}, []any{}
	seqs := map[string]any{}
	for o := range 64 {
		if o < used {
			allocs[o] = int64(len(attrs))
			attrs = append(attrs, map[string]any{
				"handle_id": fmt.Sprintf("k8s-pod-network.%064x", i*64+o),
				"secondary": map[string]any{"namespace": "default", "node": node, "pod": "pod-" + strconv.Itoa(i*64+o), "timestamp": "2026-11-28 05:00:00.000000000 +0000 UTC"},
			})
			seqs[strconv.Itoa(o)] = int64(1)
		} else {
			unalloc = append(unalloc, int64(o))
		}
	}
	obj := func(kind, name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": calico.Group + "/v1", "kind": kind, "metadata": map[string]any{"name": name}, "spec": spec}}
	}
	blk := obj("IPAMBlock", calicotest.CIDRName(p), map[string]any{
		"cidr": p.String(), "affinity": "host:" + node, "allocations": allocs, "unallocated": unalloc, "attributes": attrs,
		"strictAffinity": false, "sequenceNumber": int64(2), "sequenceNumberForAllocation": seqs,
	})
	aff := obj("BlockAffinity", node+"-"+calicotest.CIDRName(p), map[string]any{"node": node, "cidr": p.String(), "state": "confirmed", "deleted": "false"})
	if _, err := dyn.Resource(calico.IPAMBlocks).Create(ctx, blk, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := dyn.Resource(calico.BlockAffinities).Create(ctx, aff, metav1.CreateOptions{})
	return err
}

// footprint is the process's live heap and RSS after a full collection
// returned what it could to the system.
func footprint() (heap, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	data, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			rss = kb << 10
		}
	}
	return m.HeapAlloc, rss
}
