package calicoipam

import (
	"math/big"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/pool"
)

var t0 = time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)

func tpool(name, cidr string, blockSize int, mod ...func(*ipPool)) *ipPool {
	p := &ipPool{ObjectMeta: metav1.ObjectMeta{Name: name}, CIDR: netip.MustParsePrefix(cidr), BlockSize: blockSize}
	for _, m := range mod {
		m(p)
	}
	return p
}

// tblock is a block affine to host (empty for none) with used addresses in
// use and the rest free, less the released ones (at the given times).
func tblock(cidr, host string, used int, released ...time.Time) *block {
	p := netip.MustParsePrefix(cidr)
	size := 1 << (p.Addr().BitLen() - p.Bits())
	b := &block{ObjectMeta: metav1.ObjectMeta{Name: cidr}, CIDR: p, Used: used, Released: released, Free: size - used - len(released)}
	if host != "" {
		b.Affinity = "host:" + host
	}
	return b
}

func taff(host, cidr string) *affinity {
	return &affinity{ObjectMeta: metav1.ObjectMeta{Name: host + "-" + cidr}, Node: host, CIDR: netip.MustParsePrefix(cidr), State: "confirmed", Host: true}
}

func v4(usable, used, cooling int64) pool.Range {
	return pool.Range{Set: "IPv4", Usable: big.NewInt(usable), Used: used, Cooling: cooling}
}

func TestCount(t *testing.T) {
	strict := &ipamConfig{StrictAffinity: true, AutoAllocateBlocks: true}
	loose := &ipamConfig{AutoAllocateBlocks: true}
	limit1 := &ipamConfig{AutoAllocateBlocks: true, MaxBlocksPerHost: 1}
	cooldown := &ipamConfig{StrictAffinity: true, AutoAllocateBlocks: true, Cooldown: time.Minute}
	labels := map[string]string{"kubernetes.io/hostname": "n1", "zone": "a"}
	type want struct {
		Ranges  []pool.Range
		Grows   bool
		Unknown bool
		Said    string // a part of Said
	}
	for _, tc := range []struct {
		name   string
		s      state
		want   want
		reason string
	}{{
		name: "affine block has room, a free block to claim",
		s: state{pools: []*ipPool{tpool("p", "10.0.0.0/24", 26)}, config: strict,
			blocks: []*block{tblock("10.0.0.0/26", "n1", 10)}, affinities: []*affinity{taff("n1", "10.0.0.0/26")}},
		want: want{Ranges: []pool.Range{v4(64, 10, 0)}, Grows: true, Said: "IPv4: 54 of 64 free in 1 affine block, can claim a block of p (1 of 20 blocks), strictAffinity on"},
	}, {
		name: "affine block filling up, the pool's only block",
		s: state{pools: []*ipPool{tpool("p", "10.0.0.0/26", 26)}, config: strict,
			blocks: []*block{tblock("10.0.0.0/26", "n1", 61)}, affinities: []*affinity{taff("n1", "10.0.0.0/26")}},
		want: want{Ranges: []pool.Range{v4(64, 61, 0)}, Said: "IPv4: 3 of 64 free in 1 affine block, no free block in p, strictAffinity on"},
	}, {
		name: "block limit reached (maxBlocksPerHost 1)",
		s: state{pools: []*ipPool{tpool("p", "10.0.0.0/24", 26)}, config: limit1,
			blocks: []*block{tblock("10.0.0.0/26", "n1", 64), tblock("10.0.0.64/26", "n2", 1)}, affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n2", "10.0.0.64/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Said: "block limit 1 reached"},
		// The limit ends the request before borrowing, though n2 has room.
	}, {
		name: "default block limit 20 when maxBlocksPerHost is 0",
		s: func() state {
			s := state{pools: []*ipPool{tpool("p", "10.0.0.0/16", 28)}, config: loose}
			for i := range 20 {
				c := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(16 * i)}), 28).Masked()
				if i >= 16 {
					c = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(16 * (i - 16))}), 28)
				}
				s.blocks = append(s.blocks, tblock(c.String(), "n1", 16))
				s.affinities = append(s.affinities, taff("n1", c.String()))
			}
			return s
		}(),
		want: want{Ranges: []pool.Range{v4(320, 320, 0)}, Said: "block limit 20 reached"},
	}, {
		name: "no free block, strictAffinity off: borrows from another node's block",
		s: state{pools: []*ipPool{tpool("p", "10.0.0.0/25", 26)}, config: loose,
			blocks: []*block{tblock("10.0.0.0/26", "n1", 64), tblock("10.0.0.64/26", "n2", 54)}, affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n2", "10.0.0.64/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Grows: true, Said: "no free block in p, 10 free to borrow from other nodes' blocks"},
	}, {
		name: "no free block, strictAffinity on: cannot borrow",
		s: state{pools: []*ipPool{tpool("p", "10.0.0.0/25", 26)}, config: strict,
			blocks: []*block{tblock("10.0.0.0/26", "n1", 64), tblock("10.0.0.64/26", "n2", 54)}, affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n2", "10.0.0.64/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Said: "no free block in p, strictAffinity on"},
	}, {
		name: "another node's empty block is reclaimed",
		s: state{pools: []*ipPool{tpool("p", "10.0.0.0/25", 26)}, config: strict,
			blocks: []*block{tblock("10.0.0.0/26", "n1", 64), tblock("10.0.0.64/26", "n2", 0)}, affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n2", "10.0.0.64/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Grows: true, Said: "can claim a block of p"},
	}, {
		name: "autoAllocateBlocks off: neither claims nor borrows",
		s: state{pools: []*ipPool{tpool("p", "10.0.0.0/24", 26)}, config: &ipamConfig{},
			blocks: []*block{tblock("10.0.0.0/26", "n1", 64)}, affinities: []*affinity{taff("n1", "10.0.0.0/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Said: "autoAllocateBlocks off"},
	}, {
		name: "released addresses cool down, then are free",
		s: state{pools: []*ipPool{tpool("p", "10.0.0.0/26", 26)}, config: cooldown,
			blocks:     []*block{tblock("10.0.0.0/26", "n1", 60, t0.Add(-10*time.Second), t0.Add(-20*time.Second), t0.Add(-2*time.Minute), time.Time{})},
			affinities: []*affinity{taff("n1", "10.0.0.0/26")}},
		want: want{Ranges: []pool.Range{v4(64, 60, 3)}, Said: "IPv4: 1 of 64 free in 1 affine block (3 cooling down)"},
	}, {
		name: "a disabled pool's blocks do not count",
		s: state{pools: []*ipPool{tpool("old", "10.0.0.0/26", 26, func(p *ipPool) { p.Disabled = true }), tpool("new", "10.1.0.0/26", 26)}, config: strict,
			blocks:     []*block{tblock("10.0.0.0/26", "n1", 1), tblock("10.1.0.0/26", "n1", 64)},
			affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n1", "10.1.0.0/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Said: "0 of 64 free in 1 affine block, no free block in new"},
	}, {
		name: "only a disabled pool",
		s:    state{pools: []*ipPool{tpool("old", "10.0.0.0/24", 26, func(p *ipPool) { p.Disabled = true })}, config: strict},
		want: want{Unknown: true, Said: ""},
	}, {
		name: "a pool whose nodeSelector does not pick the node",
		s: state{pools: []*ipPool{tpool("b", "10.0.0.0/24", 26, func(p *ipPool) { p.NodeSelector = "zone == 'b'" }), tpool("a", "10.1.0.0/26", 26, func(p *ipPool) { p.NodeSelector = "zone == 'a' && has(kubernetes.io/hostname)" })}, config: strict,
			blocks: []*block{tblock("10.1.0.0/26", "n1", 64)}, affinities: []*affinity{taff("n1", "10.1.0.0/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Said: "no free block in a"},
	}, {
		name: "a pool for tunnels only",
		s: state{pools: []*ipPool{tpool("t", "10.0.0.0/24", 26, func(p *ipPool) { p.AllowedUses = []string{"Tunnel"} }), tpool("w", "10.1.0.0/26", 26, func(p *ipPool) { p.AllowedUses = []string{"Workload", "Tunnel"} })}, config: strict,
			blocks: []*block{tblock("10.1.0.0/26", "n1", 64)}, affinities: []*affinity{taff("n1", "10.1.0.0/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Said: "no free block in w"},
	}, {
		name: "every block of the pool claimed and full: full cluster-wide",
		s: state{pools: []*ipPool{tpool("p", "10.0.0.0/25", 26)}, config: loose,
			blocks: []*block{tblock("10.0.0.0/26", "n1", 64), tblock("10.0.0.64/26", "n2", 64)}, affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n2", "10.0.0.64/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Said: "0 free to borrow from other nodes' blocks; " + ClusterFull},
	}, {
		name: "an unparsable selector on a pool that might serve the node",
		s: state{pools: []*ipPool{tpool("odd", "10.0.0.0/24", 26, func(p *ipPool) { p.NodeSelector = "zone =~ 'a'" }), tpool("p", "10.1.0.0/26", 26)}, config: strict,
			blocks: []*block{tblock("10.1.0.0/26", "n1", 64)}, affinities: []*affinity{taff("n1", "10.1.0.0/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Unknown: true},
	}, {
		name: "an unparsable selector does not matter while the node can grow",
		s: state{pools: []*ipPool{tpool("odd", "10.0.0.0/24", 26, func(p *ipPool) { p.NodeSelector = "zone =~ 'a'" }), tpool("p", "10.1.0.0/24", 26)}, config: strict,
			blocks: []*block{tblock("10.1.0.0/26", "n1", 64)}, affinities: []*affinity{taff("n1", "10.1.0.0/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Grows: true},
	}, {
		name: "deleted affinities and other nodes' blocks are not the node's",
		s: state{pools: []*ipPool{tpool("p", "10.0.0.0/24", 26)}, config: limit1,
			blocks:     []*block{tblock("10.0.0.0/26", "n1", 64), tblock("10.0.0.64/26", "n2", 0)},
			affinities: []*affinity{func() *affinity { a := taff("n1", "10.0.0.0/26"); a.Deleted = true; return a }(), taff("n2", "10.0.0.64/26")}},
		want: want{Ranges: []pool.Range{v4(0, 0, 0)}, Grows: true},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			s.node, s.labels, s.now = "n1", labels, t0
			got := s.count()
			if !strings.Contains(got.Said, tc.want.Said) {
				t.Errorf("Said = %q, want it to contain %q", got.Said, tc.want.Said)
			}
			g := want{Ranges: got.Ranges, Grows: got.Grows, Unknown: got.Unknown != "", Said: tc.want.Said}
			if d := cmp.Diff(tc.want, g, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); d != "" {
				t.Errorf("count (-want +got):\n%s\nSaid: %s\nUnknown: %s", d, got.Said, got.Unknown)
			}
		})
	}
}

// The cluster-wide mark is only for pools with nothing left anywhere.
func TestClusterFullOnlyWhenNothingIsLeft(t *testing.T) {
	s := state{node: "n1", labels: map[string]string{}, now: t0, config: &ipamConfig{StrictAffinity: true, AutoAllocateBlocks: true},
		pools:  []*ipPool{tpool("p", "10.0.0.0/25", 26)},
		blocks: []*block{tblock("10.0.0.0/26", "n1", 64), tblock("10.0.0.64/26", "n2", 63)}, affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n2", "10.0.0.64/26")}}
	if got := s.count(); strings.Contains(got.Said, ClusterFull) {
		t.Errorf("n2 has an address free, yet Said = %q", got.Said)
	}
	if err := s.count().Exhausted(1); err == nil {
		t.Errorf("strictAffinity on, n1's block full, no free block: want exhausted")
	}
}
