package pool

import (
	"encoding/json"

	"github.com/netready/netready/pkg/config"
)

// calicoKind is Calico IPAM with the Kubernetes datastore: its blocks,
// affinities and pools are in the API server, which only the sidecar
// reads (pkg/calicoipam); STATUS reads the sidecar's verdict.
var calicoKind = kind{
	typ: config.IPAMCalico,
	make: func(network string, ipam json.RawMessage) (Source, error) {
		return makeFromSidecar(config.IPAMCalico, network, ipam)
	},
}
