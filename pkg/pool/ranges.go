package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// This file reads host-local's ranges the way host-local's allocator package
// does (LoadIPAMConfig and Range.Canonicalize), so that the plugin does not
// link that package: it pulls in plugins/pkg/ip and with it knftables, whose
// package init compiles regular expressions on every STATUS and ADD, and
// crypto. pool's tests compare the two on a table and under fuzzing.

// hostLocalIPAM is host-local's ipam object, with the same Go types as
// host-local's own, so that what one cannot decode the other cannot either.
type hostLocalIPAM struct {
	// The old single-range form, at the top of the ipam object.
	jsonRange
	Name       string
	Type       string         `json:"type"`
	Routes     []*types.Route `json:"routes"`
	DataDir    string         `json:"dataDir"`
	ResolvConf string         `json:"resolvConf"`
	Ranges     [][]jsonRange  `json:"ranges"`
}

type jsonRange struct {
	RangeStart net.IP      `json:"rangeStart,omitempty"`
	RangeEnd   net.IP      `json:"rangeEnd,omitempty"`
	Subnet     types.IPNet `json:"subnet"`
	Gateway    net.IP      `json:"gateway,omitempty"`
}

// span is one canonical range: the addresses from start to end, inclusive,
// less the gateway, which host-local never hands out.
type span struct {
	subnet              netip.Prefix
	start, end, gateway netip.Addr
}

// rangeSet is one range set; a pod takes one address from each set.
type rangeSet []span

// loadRanges reads host-local's dataDir and range sets from its ipam object,
// and refuses what host-local would refuse.
func loadRanges(ipam json.RawMessage) (dataDir string, sets []rangeSet, err error) {
	var c *hostLocalIPAM
	if err := json.Unmarshal(ipam, &c); err != nil {
		return "", nil, err
	}
	if c == nil {
		return "", nil, errors.New("the ipam object is null")
	}
	raw := c.Ranges
	if c.Subnet.IP != nil {
		raw = append([][]jsonRange{{c.jsonRange}}, raw...)
	}
	if len(raw) == 0 {
		return "", nil, errors.New("no IP ranges specified")
	}
	sets = make([]rangeSet, len(raw))
	for i, rs := range raw {
		if sets[i], err = canonicalSet(rs); err != nil {
			return "", nil, fmt.Errorf("invalid range set %d: %w", i, err)
		}
	}
	for i := range sets {
		for j := i + 1; j < len(sets); j++ {
			if sets[i].overlaps(sets[j]) {
				return "", nil, fmt.Errorf("range set %d overlaps with %d", i, j)
			}
		}
	}
	return c.DataDir, sets, nil
}

func canonicalSet(raw []jsonRange) (rangeSet, error) {
	if len(raw) == 0 {
		return nil, errors.New("empty range set")
	}
	set := make(rangeSet, len(raw))
	for i, r := range raw {
		s, err := canonicalSpan(r)
		if err != nil {
			return nil, err
		}
		if i > 0 && s.start.Is4() != set[0].start.Is4() {
			return nil, errors.New("mixed address families")
		}
		set[i] = s
	}
	for i := range set {
		for j := i + 1; j < len(set); j++ {
			if set[i].overlaps(set[j]) {
				return nil, fmt.Errorf("subnets %s and %s overlap", set[i], set[j])
			}
		}
	}
	return set, nil
}

// canonicalSpan fills in a range's defaults as host-local does: the gateway
// and the start are the subnet's first address after the network address,
// the end its last address (before the broadcast address for IPv4).
func canonicalSpan(r jsonRange) (span, error) {
	subnet, err := canonicalSubnet(r.Subnet)
	if err != nil {
		return span{}, err
	}
	s := span{subnet: subnet, gateway: subnet.Addr().Next()}
	if r.Gateway != nil {
		if s.gateway, err = canonicalIP(r.Gateway); err != nil {
			return span{}, err
		}
	}
	// host-local checks the start against the end as written, before the
	// end is checked or defaulted.
	var start, end netip.Addr
	if r.RangeStart != nil {
		if start, err = canonicalIP(r.RangeStart); err != nil {
			return span{}, err
		}
	}
	if r.RangeEnd != nil {
		end, _ = netip.AddrFromSlice(r.RangeEnd)
		end = end.Unmap()
	}
	if start.IsValid() && !within(subnet, start, start, end) {
		return span{}, fmt.Errorf("RangeStart %s not in network %s", start, subnet)
	}
	if !start.IsValid() {
		start = subnet.Addr().Next()
	}
	if r.RangeEnd != nil {
		if end, err = canonicalIP(r.RangeEnd); err != nil {
			return span{}, err
		}
		if !within(subnet, end, start, end) {
			return span{}, fmt.Errorf("RangeEnd %s not in network %s", end, subnet)
		}
	} else {
		end = lastAddr(subnet)
	}
	s.start, s.end = start, end
	return s, nil
}

// canonicalSubnet refuses a subnet with no room for a pod, or with host bits
// set.
func canonicalSubnet(n types.IPNet) (netip.Prefix, error) {
	a, err := canonicalIP(n.IP)
	if err != nil {
		return netip.Prefix{}, err
	}
	ones, bits := n.Mask.Size()
	if ones > bits-2 {
		return netip.Prefix{}, fmt.Errorf("Network %s too small to allocate from", (*net.IPNet)(&n))
	}
	if len(a.AsSlice()) != len(n.Mask) {
		return netip.Prefix{}, errors.New("IPNet IP and Mask version mismatch")
	}
	p := netip.PrefixFrom(a, ones)
	if network := p.Masked(); network != p {
		return netip.Prefix{}, fmt.Errorf("Network has host bits set. For a subnet mask of length %d the network address is %s", ones, network.Addr())
	}
	return p, nil
}

// canonicalIP makes an IPv4 address in IPv6 form IPv4.
func canonicalIP(ip net.IP) (netip.Addr, error) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}, fmt.Errorf("IP %s not v4 nor v6", ip)
	}
	return a.Unmap(), nil
}

// within is host-local's Range.Contains while the range is being read:
// same family, in the subnet, and not outside whichever bounds are set.
func within(subnet netip.Prefix, a, start, end netip.Addr) bool {
	if a.Is4() != subnet.Addr().Is4() || !subnet.Contains(a) {
		return false
	}
	if start.IsValid() && compare(a, start) < 0 {
		return false
	}
	return !end.IsValid() || compare(a, end) <= 0
}

// compare orders addresses by their numeric value, as host-local's ip.Cmp
// does, so that an IPv4 address sorts before any IPv6 address but "::1".
func compare(a, b netip.Addr) int {
	if a.Is4() == b.Is4() {
		return a.Compare(b)
	}
	return addrInt(a).Cmp(addrInt(b))
}

func addrInt(a netip.Addr) *big.Int {
	return new(big.Int).SetBytes(a.AsSlice())
}

// lastAddr is the subnet's last address, less one for IPv4's broadcast.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := range b {
		if host := p.Bits() - 8*i; host < 8 {
			b[i] |= 0xff >> max(host, 0)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	if a.Is4() {
		a = a.Prev()
	}
	return a
}

func (s span) contains(a netip.Addr) bool {
	return within(s.subnet, a, s.start, s.end)
}

func (s span) overlaps(o span) bool {
	if s.start.Is4() != o.start.Is4() {
		return false
	}
	return s.contains(o.start) || s.contains(o.end) || o.contains(s.start) || o.contains(s.end)
}

func (s span) String() string { return s.start.String() + "-" + s.end.String() }

func (rs rangeSet) overlaps(o rangeSet) bool {
	for _, a := range rs {
		for _, b := range o {
			if a.overlaps(b) {
				return true
			}
		}
	}
	return false
}

// usable counts what host-local can hand out from the set.
func (rs rangeSet) usable() *big.Int {
	total := new(big.Int)
	for _, s := range rs {
		n := new(big.Int).Sub(addrInt(s.end), addrInt(s.start))
		n.Add(n, big.NewInt(1))
		if s.contains(s.gateway) {
			n.Sub(n, big.NewInt(1))
		}
		total.Add(total, n)
	}
	return total
}

// name is the set's subnets, as the config writes them.
func (rs rangeSet) name() string {
	names := make([]string, len(rs))
	for i, s := range rs {
		names[i] = s.subnet.String()
	}
	return strings.Join(names, ",")
}
