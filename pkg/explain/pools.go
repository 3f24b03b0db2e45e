package explain

import (
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/netready/netready/pkg/pool"
)

// Pool is one network's IP pool on a node, as the sidecar's
// NetworkPoolExhausted condition says it, and for an exhausted one what
// the operator can do.
type Pool struct {
	pool.Line
	Do string `json:"do,omitempty"`
}

// poolsOf reads the pools of a node's condition.
func poolsOf(node string, c *Condition) []Pool {
	if c == nil {
		return nil
	}
	pools := pool.ParseLine(c.Message)
	if c.Status == "True" && !slices.ContainsFunc(pools, func(p pool.Line) bool { return p.State == pool.StateExhausted || p.HeldExhausted }) {
		// A message without marks (an older sidecar's) on a tainted
		// node: its short pools, by their counts (without hysteresis).
		for i, p := range pools {
			if p.State == pool.StateRoom && slices.ContainsFunc(p.Ranges, func(r pool.LineRange) bool { return r.Free.Cmp(big.NewInt(int64(p.MinFree))) < 0 }) {
				pools[i].State = pool.StateExhausted
			}
		}
	}
	var out []Pool
	for _, p := range pools {
		ps := Pool{Line: p}
		if p.State == pool.StateExhausted {
			ps.Do = pool.Advice(p.Source, node, p.Network)
		}
		out = append(out, ps)
	}
	return out
}

// exhausted is the node's exhausted pools.
func (n *NodeReport) exhausted() []Pool {
	var out []Pool
	for _, p := range n.Pools {
		if p.State == pool.StateExhausted {
			out = append(out, p)
		}
	}
	return out
}

// name is "network (source)".
func (p Pool) name() string { return p.Network + " (" + p.Source + ")" }

// freeText is "f of c free" for each range set, or "-" when nothing was
// counted.
func (p Pool) freeText() string {
	var parts []string
	for _, r := range p.Ranges {
		s := fmt.Sprintf("%s of %s free", r.Free, r.Capacity)
		if r.Cooling > 0 {
			s += fmt.Sprintf(" (%d cooling down)", r.Cooling)
		}
		if r.Set != "" {
			s += " in " + r.Set
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// stateText says the verdict for a person.
func (p Pool) stateText() string {
	switch p.State {
	case pool.StateExhausted:
		return "exhausted"
	case pool.StateRoom:
		return "has room"
	case pool.StateGrows:
		return "can grow (the source adds addresses)"
	}
	if !p.Since.IsZero() {
		s := "held: can't tell since " + p.Since.UTC().Format(time.RFC3339) + ": " + p.Why
		if p.HeldExhausted {
			s += " (exhausted when last counted: the taint stays)"
		}
		return s
	}
	// An older sidecar's message.
	if strings.HasSuffix(p.Why, pool.HeldMark) {
		return "can't tell yet, so the taint stays as it was: " + p.Why
	}
	return "can't tell, so it taints nothing: " + p.Why
}

// poolSummary is "; node N's IP pool X is exhausted (f of c free)" for
// a pod's summary, or "".
func poolSummary(n *NodeReport) string {
	ex := n.exhausted()
	if len(ex) == 0 {
		return ""
	}
	names := make([]string, len(ex))
	for i, p := range ex {
		names[i] = fmt.Sprintf("%s, %s", p.name(), p.freeText())
	}
	return fmt.Sprintf("; node %s's IP pool is exhausted: %s", n.Node, strings.Join(names, "; "))
}
