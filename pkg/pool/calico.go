package pool

import (
	"encoding/json"
	"fmt"

	"github.com/netready/netready/pkg/config"
)

// calicoKind is Calico IPAM with the Kubernetes datastore: its blocks,
// affinities and pools are in the API server, which only the sidecar
// reads (pkg/pool/calico); STATUS reads the sidecar's verdict.
var calicoKind = kind{
	typ: config.IPAMCalico,
	// Calico's plugin allocates with calico-ipam.
	ipam:   "calico-ipam",
	keep:   []string{"assign_ipv4", "assign_ipv6", "ipv4_pools", "ipv6_pools"},
	origin: Sidecar,
	advice: func(string, string) string {
		return ", or let the node claim more blocks: raise the IPAMConfig's maxBlocksPerHost, or add an IPPool with free blocks"
	},
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
// assigns from, as Calico's plugin reads them: IPv4 unless assign_ipv4 is
// "false", IPv6 only when assign_ipv6 is "true", from ipv4_pools and
// ipv6_pools (names or CIDRs) when set. Any other value is Calico's
// default, as in Calico, never an error: STATUS reads this for "auto",
// and a value Calico takes must not fail it.
func calicoScope(ipam json.RawMessage) (Scope, error) {
	var o config.CalicoIPAM
	if err := config.StrictUnmarshal(ipam, &o); err != nil {
		return Scope{}, fmt.Errorf("status ipam: %w", err)
	}
	return Scope{
		IPv4:      o.AssignIPv4 == nil || *o.AssignIPv4 != "false",
		IPv6:      o.AssignIPv6 != nil && *o.AssignIPv6 == "true",
		IPv4Pools: o.IPv4Pools, IPv6Pools: o.IPv6Pools,
	}, nil
}

// ScopeOf is what the sidecar counts for src: both families, every pool,
// but for a calico-ipam source, whose ipam object narrows it.
func ScopeOf(src Source) Scope {
	if v, ok := src.(*fromSidecar); ok && v.scope != nil {
		return *v.scope
	}
	return Scope{IPv4: true, IPv6: true}
}
