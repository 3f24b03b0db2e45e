// Package pool owns counting a node's IP pools: which source a network's
// netready entry names (status.ipam, or "auto" for the network's first
// plugin), how many of its addresses are in use, whether it can grow, and
// when it counts as exhausted. Each IPAM is one Source: host-local's
// allocation folder, the Cilium agent, the AWS VPC CNI's ipamd, and for
// calico-ipam and ovn-kubernetes, whose truth is in the API server, the
// sidecar's verdict (verdict.go). kinds.go is the one table of sources;
// line.go writes and reads the pool line of the Node's condition. STATUS
// and the sidecar's node taint both use it, so that the two never
// disagree about a pool. The sources that need the API server live in
// pool/calico and pool/ovn, and the sidecar's count loop in pool/watch,
// so that the plugin never links client-go.
package pool

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"path/filepath"
)

// DefaultDataDir is host-local's default dataDir.
const DefaultDataDir = "/var/lib/cni/networks"

// Range is one range set of a pool (a pod takes one address from each) and
// how much of it is used.
type Range struct {
	// Set names the range set by its subnets ("10.1.0.0/24").
	Set    string   `json:"set"`
	Usable *big.Int `json:"usable"`
	Used   int64    `json:"used"`
	// Cooling are addresses released but not yet given out again
	// (ipamd's cooldown): neither used nor free.
	Cooling int64 `json:"cooling,omitempty"`
	// Grows: the source adds addresses to this range set by itself while
	// it is short (one family of a dual-stack Calico pool that can still
	// claim a block), so it is never what exhausts the pool.
	Grows bool `json:"grows,omitempty"`
}

// Free is what is left.
func (r Range) Free() *big.Int {
	return new(big.Int).Sub(r.Usable, big.NewInt(r.Used+r.Cooling))
}

// InUse says "n of m addresses in use", the wording of STATUS and of the
// node condition.
func (r Range) InUse() string {
	if r.Cooling > 0 {
		return fmt.Sprintf("%d of %s addresses in use, %d cooling down", r.Used, r.Usable, r.Cooling)
	}
	return fmt.Sprintf("%d of %s addresses in use", r.Used, r.Usable)
}

// Spec is a host-local pool: its ranges and where host-local records
// allocations.
type Spec struct {
	Network string
	// Dir is the network's folder under host-local's dataDir: one file per
	// allocated address, named by the address.
	Dir    string
	ranges []rangeSet
}

// Load reads a host-local ipam object as host-local does.
func Load(network string, ipam json.RawMessage) (*Spec, error) {
	dataDir, ranges, err := loadRanges(ipam)
	if err != nil {
		return nil, fmt.Errorf("status ipam: %w", err)
	}
	if dataDir == "" {
		dataDir = DefaultDataDir
	}
	return &Spec{Network: network, Dir: filepath.Join(dataDir, network), ranges: ranges}, nil
}

// Count reads the allocation folder once, by file names only.
func (s *Spec) Count() ([]Range, error) {
	out := s.unused()
	var bounds []bound
	for i := range s.ranges {
		for _, r := range s.ranges[i] {
			bounds = append(bounds, bound{set: i, span: r})
		}
	}
	err := eachAddress(s.Dir, func(ip netip.Addr) {
		for _, b := range bounds {
			if b.holds(ip) {
				out[b.set].Used++
				return
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// unused is each range set with nothing counted yet.
func (s *Spec) unused() []Range {
	out := make([]Range, len(s.ranges))
	for i, rs := range s.ranges {
		out[i] = Range{Set: rs.name(), Usable: rs.usable()}
	}
	return out
}

// Short reports whether r has fewer than minFree addresses left, or, when
// it was short at the last look, fewer than minFree+1: the one address of
// hysteresis keeps a node from flapping at the edge.
func Short(r Range, minFree int, wasShort bool) bool {
	limit := int64(minFree)
	if wasShort {
		limit++
	}
	return r.Free().Cmp(big.NewInt(limit)) < 0
}

// Shortfall describes the first range set of rs with fewer than minFree
// addresses left that its source does not grow, or returns nil.
func Shortfall(rs []Range, minFree int) error {
	for _, r := range rs {
		if r.Grows || !Short(r, minFree, false) {
			continue
		}
		what := "IP pool exhausted"
		if r.Free().Sign() > 0 {
			what = fmt.Sprintf("IP pool below minFree %d", minFree)
		}
		where := ""
		if len(rs) > 1 {
			where = " in " + r.Set
		}
		return fmt.Errorf("%s (%s%s)", what, r.InUse(), where)
	}
	return nil
}

// bound is a range with the index of its set.
type bound struct {
	set int
	span
}

func (b bound) holds(ip netip.Addr) bool {
	ip = ip.Unmap()
	return b.contains(ip) && ip != b.gateway
}
