package pool

import (
	"context"
	"encoding/json"

	"github.com/netready/netready/pkg/config"
)

// hostLocalKind counts host-local's allocation folder: one file per
// address. The folder is the whole truth, so it never says it cannot
// tell, and its ranges never grow.
var hostLocalKind = kind{
	typ:    config.IPAMHostLocal,
	origin: Folder,
	advice: func(node, network string) string {
		return ", or widen network " + network + "'s host-local ranges in its CNI config on " + node
	},
	// "auto" takes host-local from the first plugin's ipam object, not
	// from a plugin type.
	make: func(network string, ipam json.RawMessage) (Source, error) { return Load(network, ipam) },
}

// Type is "host-local".
func (s *Spec) Type() string { return config.IPAMHostLocal }

// Where is the allocation folder.
func (s *Spec) Where() string { return s.Dir }

// Read is Count as a Source reads.
func (s *Spec) Read(context.Context, *Memo) (Count, error) {
	rs, err := s.Count()
	if err != nil {
		return Count{}, err
	}
	return Count{Ranges: rs}, nil
}
