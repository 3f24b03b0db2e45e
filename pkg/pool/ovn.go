package pool

import (
	"encoding/json"
	"fmt"

	"github.com/netready/netready/pkg/config"
)

// ovnKind is ovn-kubernetes: ovnkube allocates each pod's address from
// the node's subnet (the Node annotation k8s.ovn.org/node-subnets) and
// records it on the pod (k8s.ovn.org/pod-networks). Both are in the API
// server, which only the sidecar reads (pkg/pool/ovn); STATUS reads the
// sidecar's verdict.
var ovnKind = kind{
	typ:    config.IPAMOVN,
	plugin: "ovn-k8s-cni-overlay",
	origin: Sidecar,
	advice: func(string, string) string {
		return "; for more per node, a larger host subnet (the host prefix of ovn-kubernetes' cluster subnets), which nodes get as they join"
	},
	make: func(network string, ipam json.RawMessage) (Source, error) {
		return makeFromSidecar(config.IPAMOVN, network, ipam)
	},
}

// makeFromSidecar makes the source of a type the sidecar counts: its
// ipam object has nothing but the type.
func makeFromSidecar(typ, network string, ipam json.RawMessage) (Source, error) {
	var o struct {
		Type string `json:"type"`
	}
	if err := config.StrictUnmarshal(ipam, &o); err != nil {
		return nil, fmt.Errorf("status ipam: %w", err)
	}
	return newFromSidecar(typ, network), nil
}
