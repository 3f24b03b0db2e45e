package calico

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/netready/netready/pkg/pool"
)

// defaultMaxBlocksPerHost is calico-ipam's block limit when IPAMConfig
// sets none (maxBlocksPerHost 0): autoAssign defaults it to 20
// (libcalico-go/lib/ipam/ipam.go; libcalico-go#1368, Calico 3.18).
const defaultMaxBlocksPerHost = 20

// ClusterFull is in a Count's Said, and the Count's ClusterFull is set,
// when no pool that serves the node has a free address or a free block
// anywhere in the cluster: every node's pods are short, not only this
// one's. Each node's taint says it; the alert on
// netready_pool_cluster_full says it once.
const ClusterFull = "every IP pool that serves this node is full cluster-wide"

// state is what the informers hold, as Count reads it.
type state struct {
	node       string
	labels     map[string]string
	pools      []*ipPool
	blocks     []*block
	affinities []*affinity
	// config is nil when there is no IPAMConfig "default": calico-ipam
	// then takes strictAffinity off, autoAllocateBlocks on, no limit set.
	config *ipamConfig
	now    time.Time
}

// family is one address family's reading.
type family struct {
	name                  string
	pools                 []*ipPool
	owned                 int
	usable, used, cooling int64
	limit                 int
	claimable             bool // a block-sized CIDR of a pool is free, or an empty block can be reclaimed
	borrowable            int64
	canClaim, grows       bool
	full                  bool // nothing free anywhere in its pools
}

// count reads calico-ipam's rules for an auto-assigned pod address off
// state (libcalico-go/lib/ipam/ipam.go autoAssign): the node's affine
// blocks first; then a new block while the node holds fewer than the block
// limit and autoAllocateBlocks is on, if a pool that serves the node has
// one free; when it has none, with strictAffinity off, any address free in
// another block of those pools. The block limit and autoAllocateBlocks off
// both end the request before borrowing. scope is the families and pools
// the chain's Calico CNI config assigns from.
func (s *state) count(scope pool.Scope) pool.Count {
	cfg := ipamConfig{AutoAllocateBlocks: true}
	if s.config != nil {
		cfg = *s.config
	}
	limit := cfg.MaxBlocksPerHost
	if limit == 0 {
		limit = defaultMaxBlocksPerHost
	}

	eligible, unsure, notes := s.eligiblePools()
	var cnt pool.Count
	if !scope.IPv4 && !scope.IPv6 {
		cnt.Unknown = `calico-ipam: the CNI config assigns no address (assign_ipv4 "false", assign_ipv6 not "true")`
		return cnt
	}
	var said []string
	grows, full := true, true
	for _, fam := range []struct {
		is4       bool
		on        bool
		requested []string
	}{{true, scope.IPv4, scope.IPv4Pools}, {false, scope.IPv6, scope.IPv6Pools}} {
		if !fam.on {
			continue // the CNI config does not assign this family
		}
		is4 := fam.is4
		var fp []*ipPool
		if len(fam.requested) > 0 {
			var missing string
			fp, missing = s.requestedPools(fam.requested, is4)
			if missing != "" {
				cnt.Unknown = "calico-ipam: " + missing
				return cnt
			}
		} else {
			for _, p := range eligible {
				if p.CIDR.Addr().Is4() == is4 {
					fp = append(fp, p)
				}
			}
		}
		if len(fp) == 0 {
			continue
		}
		f := s.family(is4, fp, cfg, limit)
		// A family that can claim or borrow is never the one short: a
		// dual-stack pod fails only on a family that cannot grow.
		cnt.Ranges = append(cnt.Ranges, pool.Range{Set: f.name, Usable: big.NewInt(f.usable), Used: f.used, Cooling: f.cooling, Grows: f.grows})
		said = append(said, f.say(cfg))
		grows = grows && f.grows
		full = full && f.full
	}
	if len(cnt.Ranges) == 0 {
		if len(unsure) > 0 {
			cnt.Unknown = "calico-ipam: cannot tell which IP pools serve this node: " + strings.Join(unsure, "; ")
			return cnt
		}
		cnt.Unknown = "calico-ipam: no enabled IP pool for workloads selects node " + s.node + " (check the IPPools' nodeSelector, disabled and allowedUses)"
		return cnt
	}
	cnt.Grows = grows
	cnt.Said = "calico-ipam: " + strings.Join(said, "; ")
	if full {
		cnt.Said += "; " + ClusterFull
		cnt.ClusterFull = true
	}
	if len(notes) > 0 {
		cnt.Said += "; " + strings.Join(notes, "; ")
	}
	if !grows && len(unsure) > 0 {
		// A pool netready cannot judge may serve the node and have room.
		cnt.Unknown = "calico-ipam: cannot tell whether these IP pools serve this node: " + strings.Join(unsure, "; ")
	}
	return cnt
}

// eligiblePools are the pools auto-assign takes a pod address from on this
// node (determinePools, filterPoolsByUse): enabled, automatic, for
// workloads, selecting the node. unsure names the ones netready cannot
// judge; notes the ones it leaves out for a reason worth saying.
func (s *state) eligiblePools() (eligible []*ipPool, unsure, notes []string) {
	for _, p := range s.pools {
		switch {
		case p.Invalid != "":
			unsure = append(unsure, fmt.Sprintf("IPPool %s: %s", p.Name, p.Invalid))
			continue
		case p.Disabled, p.AssignmentMode != "" && p.AssignmentMode != "Automatic":
			continue
		case len(p.AllowedUses) > 0 && !slices.Contains(p.AllowedUses, "Workload"):
			continue
		}
		sel, err := parseSelector(p.NodeSelector)
		if err != nil {
			unsure = append(unsure, fmt.Sprintf("IPPool %s: nodeSelector %q: %v", p.Name, p.NodeSelector, err))
			continue
		}
		if !sel.matches(s.labels) {
			continue
		}
		if ns := strings.TrimSpace(p.NamespaceSelector); ns != "" && ns != "all()" {
			// It serves only some namespaces' pods.
			notes = append(notes, fmt.Sprintf("IPPool %s (namespaceSelector %q) not counted", p.Name, ns))
			continue
		}
		eligible = append(eligible, p)
	}
	return eligible, unsure, notes
}

// requestedPools are the pools the CNI config's ipv4_pools or ipv6_pools
// name, by name or CIDR. calico-ipam takes them whatever their
// nodeSelector (determinePools), but only enabled and for workloads;
// missing says which is not, for then every request fails, which is not
// exhaustion.
func (s *state) requestedPools(requested []string, is4 bool) (fp []*ipPool, missing string) {
	for _, want := range requested {
		var found *ipPool
		for _, p := range s.pools {
			if p.Invalid == "" && (p.Name == want || p.CIDR.String() == want || p.CIDR.Masked().String() == want) {
				found = p
				break
			}
		}
		switch {
		case found == nil:
			return nil, fmt.Sprintf("the CNI config's pool %q is not an IPPool", want)
		case found.Disabled || found.CIDR.Addr().Is4() != is4:
			return nil, fmt.Sprintf("the CNI config's pool %q (IPPool %s) is disabled or of the other family: calico-ipam fails every request", want, found.Name)
		case len(found.AllowedUses) > 0 && !slices.Contains(found.AllowedUses, "Workload"):
			continue
		}
		if !slices.Contains(fp, found) {
			fp = append(fp, found)
		}
	}
	return fp, ""
}

func poolOf(pools []*ipPool, p netip.Prefix) *ipPool {
	for _, pl := range pools {
		if pl.CIDR.Contains(p.Addr()) {
			return pl
		}
	}
	return nil
}

func (s *state) family(is4 bool, pools []*ipPool, cfg ipamConfig, limit int) family {
	f := family{name: "IPv6", pools: pools, limit: limit}
	if is4 {
		f.name = "IPv4"
	}
	mine := "host:" + s.node
	// The node's blocks: its affinities (getAffineBlocks lists all but the
	// deleted ones, whatever their state) in the pools that serve it.
	owned := make(map[netip.Prefix]bool)
	for _, a := range s.affinities {
		if a.Node != s.node || a.Deleted || !a.Host || !a.CIDR.IsValid() || a.CIDR.Addr().Is4() != is4 || owned[a.CIDR] {
			continue
		}
		if poolOf(pools, a.CIDR) != nil {
			owned[a.CIDR] = true
		}
	}
	byCIDR := make(map[netip.Prefix]*block)
	perPool := make(map[*ipPool]int)
	for _, b := range s.blocks {
		if b.Invalid != "" || b.CIDR.Addr().Is4() != is4 {
			continue
		}
		byCIDR[b.CIDR] = b
		p := poolOf(pools, b.CIDR)
		if p == nil {
			continue
		}
		perPool[p]++
		used, cooling, free := s.usage(b, cfg.Cooldown)
		if b.Affinity != mine || !owned[b.CIDR] {
			// findUsableBlock reclaims another node's empty block, and
			// borrowing takes any free address of a block not the node's.
			// A block marked as the node's without a live affinity is
			// counted so too: it is not among the node's affine blocks,
			// and counting it as room errs away from exhausted.
			if used == 0 && cooling == 0 && free > 0 {
				f.claimable = true
			}
			f.borrowable += free
		}
	}
	for cidr := range owned {
		f.owned++
		b, ok := byCIDR[cidr]
		switch {
		case !ok:
			// getBlockFromAffinity creates the block of an affinity that
			// has none: all of it is the node's.
			n := int64(1) << (cidr.Addr().BitLen() - cidr.Bits())
			f.usable += n
		case b.Affinity == mine:
			used, cooling, free := s.usage(b, cfg.Cooldown)
			f.usable += used + cooling + free
			f.used += used
			f.cooling += cooling
		}
	}
	for _, p := range pools {
		if perPool[p] < blocksIn(p) {
			f.claimable = true
		}
	}
	f.canClaim = cfg.AutoAllocateBlocks && f.owned < limit
	f.grows = f.canClaim && (f.claimable || !cfg.StrictAffinity && f.borrowable > 0)
	f.full = !f.claimable && f.borrowable == 0 && f.usable-f.used-f.cooling <= 0
	return f
}

// usage counts a block: released addresses still in their cooldown are
// cooling; once it has passed, the next auto-assign deallocates them, so
// they are free. A release time that could not be read counts as free:
// a guess must err away from exhausted.
func (s *state) usage(b *block, cooldown time.Duration) (used, cooling, free int64) {
	used, free = int64(b.Used), int64(b.Free)
	for _, at := range b.Released {
		if !at.IsZero() && s.now.Sub(at) < cooldown {
			cooling++
		} else {
			free++
		}
	}
	return used, cooling, free
}

// blocksIn is how many blocks a pool holds, capped where it stops
// mattering (an IPv6 pool's count overflows an int).
func blocksIn(p *ipPool) int {
	bits := p.BlockSize - p.CIDR.Bits()
	if bits >= 30 {
		return 1 << 30
	}
	return 1 << bits
}

func (f family) say(cfg ipamConfig) string {
	free := f.usable - f.used - f.cooling
	blocks := "affine blocks"
	if f.owned == 1 {
		blocks = "affine block"
	}
	s := fmt.Sprintf("%s: %d of %d free in %d %s", f.name, free, f.usable, f.owned, blocks)
	if f.cooling > 0 {
		s += fmt.Sprintf(" (%d cooling down)", f.cooling)
	}
	names := make([]string, len(f.pools))
	for i, p := range f.pools {
		names[i] = p.Name
	}
	pools := strings.Join(names, ", ")
	switch {
	case !cfg.AutoAllocateBlocks:
		s += ", autoAllocateBlocks off"
	case f.owned >= f.limit:
		s += fmt.Sprintf(", block limit %d reached", f.limit)
	case f.claimable:
		s += fmt.Sprintf(", can claim a block of %s (%d of %d blocks)", pools, f.owned, f.limit)
	default:
		s += ", no free block in " + pools
	}
	if cfg.StrictAffinity {
		s += ", strictAffinity on"
	} else if f.canClaim && !f.claimable {
		s += fmt.Sprintf(", %d free to borrow from other nodes' blocks", f.borrowable)
	}
	return s
}
