package calico

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

// both is the scope of a dual-stack Calico CNI config with no pools named.
var both = pool.Scope{IPv4: true, IPv6: true}

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

func grown(r pool.Range) pool.Range {
	r.Grows = true
	return r
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
		want: want{Ranges: []pool.Range{v4(64, 60, 2)}, Said: "IPv4: 2 of 64 free in 1 affine block (2 cooling down)"},
		// The release whose time could not be read is free: a guess
		// errs away from exhausted.
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
	}, {
		name: "a block marked as the node's without a live affinity is room, not the node's",
		s: state{pools: []*ipPool{tpool("p", "10.0.0.0/25", 26)}, config: loose,
			blocks: []*block{tblock("10.0.0.0/26", "n1", 64), tblock("10.0.0.64/26", "n1", 0)}, affinities: []*affinity{taff("n1", "10.0.0.0/26")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0)}, Grows: true},
	}, {
		name: "dual stack: IPv4 full and cannot grow, IPv6 short but can claim",
		s: state{pools: []*ipPool{tpool("p4", "10.0.0.0/26", 26), tpool("p6", "fd00::/120", 122)}, config: strict,
			blocks:     []*block{tblock("10.0.0.0/26", "n1", 64), tblock("fd00::/122", "n1", 64)},
			affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n1", "fd00::/122")}},
		want: want{Ranges: []pool.Range{v4(64, 64, 0), grown(pool.Range{Set: "IPv6", Usable: big.NewInt(64), Used: 64})}},
	}, {
		name: "dual stack: IPv4 short but can claim, IPv6 has room and cannot grow",
		s: state{pools: []*ipPool{tpool("p4", "10.0.0.0/24", 26), tpool("p6", "fd00::/122", 122)}, config: strict,
			blocks:     []*block{tblock("10.0.0.0/26", "n1", 64), tblock("fd00::/122", "n1", 10)},
			affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n1", "fd00::/122")}},
		want: want{Ranges: []pool.Range{grown(v4(64, 64, 0)), {Set: "IPv6", Usable: big.NewInt(64), Used: 10}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			s.node, s.labels, s.now = "n1", labels, t0
			got := s.count(both)
			if tc.want.Grows {
				// One family: its range set grows as the pool does.
				for i := range tc.want.Ranges {
					tc.want.Ranges[i].Grows = true
				}
			}
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

// A dual-stack pod takes an address of each family: the pool is exhausted
// when a family that cannot grow is short, whatever the other can do, and
// not when only a family that can grow is short.
func TestDualStackExhaustedByTheFamilyThatCannotGrow(t *testing.T) {
	strict := &ipamConfig{StrictAffinity: true, AutoAllocateBlocks: true}
	for _, tc := range []struct {
		name      string
		pools     []*ipPool
		blocks    []*block
		exhausted string // in the error, or "" for not exhausted
	}{{
		name:      "IPv4 full and cannot grow, IPv6 can claim",
		pools:     []*ipPool{tpool("p4", "10.0.0.0/26", 26), tpool("p6", "fd00::/120", 122)},
		blocks:    []*block{tblock("10.0.0.0/26", "n1", 64), tblock("fd00::/122", "n1", 64)},
		exhausted: "IPv4",
	}, {
		name:      "IPv6 full and cannot grow, IPv4 can claim",
		pools:     []*ipPool{tpool("p4", "10.0.0.0/24", 26), tpool("p6", "fd00::/122", 122)},
		blocks:    []*block{tblock("10.0.0.0/26", "n1", 64), tblock("fd00::/122", "n1", 64)},
		exhausted: "IPv6",
	}, {
		name:   "IPv4 short but can claim, IPv6 has room",
		pools:  []*ipPool{tpool("p4", "10.0.0.0/24", 26), tpool("p6", "fd00::/122", 122)},
		blocks: []*block{tblock("10.0.0.0/26", "n1", 64), tblock("fd00::/122", "n1", 10)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := state{node: "n1", labels: map[string]string{}, now: t0, config: strict, pools: tc.pools, blocks: tc.blocks,
				affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n1", "fd00::/122")}}
			err := s.count(both).Exhausted(1)
			switch {
			case tc.exhausted == "" && err != nil:
				t.Errorf("exhausted: %v", err)
			case tc.exhausted != "" && (err == nil || !strings.Contains(err.Error(), "in "+tc.exhausted)):
				t.Errorf("Exhausted = %v, want exhausted in %s", err, tc.exhausted)
			}
		})
	}
}

// The CNI config's ipam narrows the count: a family it does not assign is
// not counted, and named pools are all it takes from, whatever their
// nodeSelector; a named pool that is not there is cannot tell.
func TestCountInScope(t *testing.T) {
	strict := &ipamConfig{StrictAffinity: true, AutoAllocateBlocks: true}
	base := state{node: "n1", labels: map[string]string{"zone": "a"}, now: t0, config: strict,
		pools: []*ipPool{
			tpool("full4", "10.0.0.0/26", 26),
			tpool("roomy4", "10.1.0.0/16", 26, func(p *ipPool) { p.NodeSelector = "zone == 'b'" }),
			tpool("full6", "fd00::/122", 122),
		},
		blocks:     []*block{tblock("10.0.0.0/26", "n1", 64), tblock("fd00::/122", "n1", 64)},
		affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n1", "fd00::/122")}}
	for _, tc := range []struct {
		name      string
		scope     pool.Scope
		exhausted string // in the error; "" for not exhausted
		unknown   string // in Unknown
		sets      []string
	}{{
		name: "IPv4 only (Calico's default): the full IPv6 pool is not counted", scope: pool.Scope{IPv4: true},
		exhausted: "IP pool exhausted", sets: []string{"IPv4"},
	}, {
		name: "a pool the node's selector leaves out, named in ipv4_pools, is taken", scope: pool.Scope{IPv4: true, IPv4Pools: []string{"roomy4"}},
		sets: []string{"IPv4"},
	}, {
		name: "pools named by CIDR", scope: pool.Scope{IPv4: true, IPv6: true, IPv4Pools: []string{"10.1.0.0/16"}, IPv6Pools: []string{"fd00::/122"}},
		exhausted: "in IPv6", sets: []string{"IPv4", "IPv6"},
	}, {
		name: "a named pool that is not there", scope: pool.Scope{IPv4: true, IPv4Pools: []string{"gone"}},
		unknown: `the CNI config's pool "gone" is not an IPPool`,
	}, {
		name: "neither family assigned", scope: pool.Scope{},
		unknown: "the CNI config assigns no address",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			got := s.count(tc.scope)
			if !strings.Contains(got.Unknown, tc.unknown) || tc.unknown == "" && got.Unknown != "" {
				t.Fatalf("Unknown = %q, want %q", got.Unknown, tc.unknown)
			}
			var sets []string
			for _, r := range got.Ranges {
				sets = append(sets, r.Set)
			}
			if d := cmp.Diff(tc.sets, sets); d != "" {
				t.Errorf("range sets (-want +got):\n%s", d)
			}
			err := got.Exhausted(1)
			switch {
			case tc.exhausted == "" && err != nil:
				t.Errorf("exhausted: %v", err)
			case tc.exhausted != "" && (err == nil || !strings.Contains(err.Error(), tc.exhausted)):
				t.Errorf("Exhausted = %v, want %q", err, tc.exhausted)
			}
		})
	}
}

// The cluster-wide mark is only for pools with nothing left anywhere.
func TestClusterFullOnlyWhenNothingIsLeft(t *testing.T) {
	s := state{node: "n1", labels: map[string]string{}, now: t0, config: &ipamConfig{StrictAffinity: true, AutoAllocateBlocks: true},
		pools:  []*ipPool{tpool("p", "10.0.0.0/25", 26)},
		blocks: []*block{tblock("10.0.0.0/26", "n1", 64), tblock("10.0.0.64/26", "n2", 63)}, affinities: []*affinity{taff("n1", "10.0.0.0/26"), taff("n2", "10.0.0.64/26")}}
	if got := s.count(both); strings.Contains(got.Said, ClusterFull) {
		t.Errorf("n2 has an address free, yet Said = %q", got.Said)
	}
	if err := s.count(both).Exhausted(1); err == nil {
		t.Errorf("strictAffinity on, n1's block full, no free block: want exhausted")
	}
}
