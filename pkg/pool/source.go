package pool

import (
	"context"
	"fmt"
	"time"
)

// Source is where a network's pod addresses come from: one per IPAM that
// netready can count (status.ipam's "type").
type Source interface {
	// Type is the status.ipam type ("host-local", "cilium", ...).
	Type() string
	// Where names what is read (a folder, a socket, a URL), for messages
	// and as the key of a kept answer.
	Where() string
	// Read counts the pool once, within ctx. An error is a pool that
	// cannot be counted for a reason the operator must fix (host-local's
	// folder cannot be read); an agent that does not answer, or answers
	// what netready cannot read, is a Count that cannot tell. memo is what
	// the source keeps between reads; it may change it.
	Read(ctx context.Context, memo *Memo) (Count, error)
}

// Count is one reading of a pool.
type Count struct {
	// Ranges are the pool's range sets (a pod takes one address from
	// each): a family's addresses for the agents.
	Ranges []Range `json:"ranges,omitempty"`
	// Grows: the source adds addresses by itself while it is short
	// (ipamd's warm pool below the node's maximum), so being short is not
	// being exhausted.
	Grows bool `json:"grows,omitempty"`
	// Unknown, when set, says why the source cannot tell whether the
	// pool is exhausted. A pool that cannot tell is never exhausted;
	// Ranges may still hold what was counted.
	Unknown string `json:"unknown,omitempty"`
	// Said is the source's own account of its count ("IPv4: 14/14
	// allocated from 10.2.0.0/28"), which messages quote.
	Said string `json:"said,omitempty"`
	// ClusterFull: every pool that serves the node is full on every node
	// (calico-ipam: no free address or block anywhere in them). Every
	// node says the same, so it is alerted on once per cluster.
	ClusterFull bool `json:"clusterFull,omitempty"`
}

// Memo is what a source keeps from one read to the next: in STATUS's
// kept answer (one short process per call), or in the sidecar's memory.
type Memo struct {
	// Refusals is ipamd's count of EC2 refusing addresses for want of
	// them (awscni_aws_api_error_count of InsufficientCidrBlocks and
	// InsufficientFreeAddressesInSubnet) at the last read; RefusedAt is
	// when it was last seen to rise.
	Refusals  *float64  `json:"refusals,omitempty"`
	RefusedAt time.Time `json:"refusedAt,omitzero"`
}

// Exhausted says why the pool is exhausted: a range set has fewer than
// minFree addresses left and the source cannot grow it. nil when it has
// room, when it grows, and when it cannot tell.
func (c Count) Exhausted(minFree int) error {
	if c.Unknown != "" || c.Grows {
		return nil
	}
	err := Shortfall(c.Ranges, minFree)
	if err == nil || c.Said == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, c.Said)
}

// Tightest is the range set with the fewest addresses free: the one that
// stops pods first. ok is false when nothing was counted.
func (c Count) Tightest() (r Range, ok bool) {
	for i, x := range c.Ranges {
		if i == 0 || x.Free().Cmp(r.Free()) < 0 {
			r = x
		}
	}
	return r, len(c.Ranges) > 0
}
