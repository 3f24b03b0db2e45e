package pool

import (
	"encoding/json"
	"fmt"

	"github.com/netready/netready/pkg/config"
)

// calicoKind is Calico IPAM with the Kubernetes datastore: its blocks,
// affinities and pools are in the API server, which only the sidecar
// reads (pkg/calicoipam); STATUS reads the sidecar's verdict.
var calicoKind = kind{
	typ: config.IPAMCalico,
	make: func(network string, ipam json.RawMessage) (Source, error) {
		sc, err := calicoScope(ipam)
		if err != nil {
			return nil, err
		}
		s := newFromSidecar(config.IPAMCalico, network)
		s.scope = &sc
		return s, nil
	},
}

// Scope is the part of a sidecar-counted pool that the chain's IPAM
// assigns from: calico-ipam's families and pools. A family with no pools
// named takes every pool that serves the node.
type Scope struct {
	IPv4, IPv6           bool
	IPv4Pools, IPv6Pools []string
}

// calicoScope reads the keys of Calico's CNI ipam object that say what it
// assigns from, with Calico's defaults: IPv4 unless assign_ipv4 is
// "false", IPv6 only when assign_ipv6 is "true", from ipv4_pools and
// ipv6_pools (names or CIDRs) when set.
func calicoScope(ipam json.RawMessage) (Scope, error) {
	var o struct {
		Type       string   `json:"type"`
		AssignIPv4 *string  `json:"assign_ipv4"`
		AssignIPv6 *string  `json:"assign_ipv6"`
		IPv4Pools  []string `json:"ipv4_pools"`
		IPv6Pools  []string `json:"ipv6_pools"`
	}
	if err := config.StrictUnmarshal(ipam, &o); err != nil {
		return Scope{}, fmt.Errorf("status ipam: %w", err)
	}
	flag := func(key string, v *string, def bool) (bool, error) {
		switch {
		case v == nil:
			return def, nil
		case *v == "true":
			return true, nil
		case *v == "false":
			return false, nil
		}
		return false, fmt.Errorf(`status ipam: %s: %q is neither "true" nor "false", as Calico's CNI plugin takes it`, key, *v)
	}
	v4, err := flag("assign_ipv4", o.AssignIPv4, true)
	if err != nil {
		return Scope{}, err
	}
	v6, err := flag("assign_ipv6", o.AssignIPv6, false)
	if err != nil {
		return Scope{}, err
	}
	if !v4 && !v6 {
		return Scope{}, fmt.Errorf(`status ipam: assign_ipv4 and assign_ipv6 are both off: Calico assigns no address, so there is no pool to count`)
	}
	return Scope{IPv4: v4, IPv6: v6, IPv4Pools: o.IPv4Pools, IPv6Pools: o.IPv6Pools}, nil
}

// ScopeOf is what the sidecar counts for src: both families, every pool,
// but for a calico-ipam source, whose ipam object narrows it.
func ScopeOf(src Source) Scope {
	if v, ok := src.(*fromSidecar); ok && v.scope != nil {
		return *v.scope
	}
	return Scope{IPv4: true, IPv6: true}
}
