package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"strconv"
	"strings"

	"github.com/netready/netready/pkg/config"
)

// ciliumKind reads the Cilium agent's own count: ipam.status of its
// GET /v1/healthz (not brief). The agent refreshes it with its status
// collector, every 5 s by default (--status-collector-interval), so a
// count is up to that old.
//
// In cluster-pool and kubernetes IPAM modes the agent allocates from the
// node's pod CIDR and says "IPv4: 252/254 allocated from 10.2.237.0/24"
// (", IPv6: ..." in dual stack). Its count holds every address it gave
// out, the router's and the health endpoint's included: they come from
// the same allocator. The CIDR is fixed, so the pool cannot grow.
//
// In CRD and ENI modes it says "IPv4: 3/10 allocated": the operator may
// add addresses up to a limit the agent does not show, so the pool is
// counted but cannot tell. Multi-pool ("2 IPAM pool(s) available") and a
// delegated IPAM give no capacity at all: cannot tell.
var ciliumKind = kind{
	typ:    config.IPAMCilium,
	plugin: "cilium-cni",
	origin: Agent,
	advice: func(string, string) string {
		return "; for more per node, a larger per-node pod CIDR (Cilium cluster-pool: clusterPoolIPv4MaskSize; kubernetes IPAM: kube-controller-manager --node-cidr-mask-size), which nodes get as they join"
	},
	make: func(network string, ipam json.RawMessage) (Source, error) {
		var c config.CiliumIPAM
		if err := config.StrictUnmarshal(ipam, &c); err != nil {
			return nil, fmt.Errorf("status ipam: %w", err)
		}
		if c.Socket == "" {
			c.Socket = config.DefaultCiliumSocket
		}
		e, err := parseEndpoint(c.Socket)
		if err != nil {
			return nil, fmt.Errorf("status ipam: socket %w", err)
		}
		return &cilium{agent: e}, nil
	},
}

// maxCiliumStatus bounds the agent's full status, which lists every
// allocated address and every controller.
const maxCiliumStatus = 16 << 20

type cilium struct {
	agent endpoint
}

func (c *cilium) Type() string  { return config.IPAMCilium }
func (c *cilium) Where() string { return c.agent.raw }

func (c *cilium) Read(ctx context.Context, _ *Memo) (Count, error) {
	// No "brief" header: the brief status leaves ipam out.
	body, err := c.agent.get(ctx, "/v1/healthz", maxCiliumStatus)
	if err != nil {
		return Count{Unknown: "the Cilium agent: " + err.Error()}, nil
	}
	var st struct {
		IPAM *struct {
			Status string `json:"status"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return Count{Unknown: fmt.Sprintf("the Cilium agent's status at %s is not JSON: %v", c.agent.raw, err)}, nil
	}
	if st.IPAM == nil || st.IPAM.Status == "" {
		return Count{Unknown: "the Cilium agent's status has no ipam yet (is the agent still starting?)"}, nil
	}
	return parseCiliumIPAM(st.IPAM.Status), nil
}

// parseCiliumIPAM reads ipam.status as the agent's IPAM.Dump writes it:
// "IPv4: <its status>, IPv6: <its status>", either part empty when the
// family is off (so an IPv4-only agent ends it with ", ").
func parseCiliumIPAM(status string) Count {
	cnt := Count{Said: "Cilium says " + strconv.Quote(strings.Trim(status, ", "))}
	for _, part := range strings.Split(status, ", ") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		family, rest, ok := strings.Cut(part, ": ")
		if !ok || (family != "IPv4" && family != "IPv6") {
			cnt.Unknown = fmt.Sprintf("the Cilium agent's ipam status %q is in a form netready does not know", status)
			return cnt
		}
		r, grows, err := parseCiliumFamily(family, rest)
		if err != nil {
			cnt.Unknown = err.Error()
			return cnt
		}
		if grows {
			cnt.Unknown = fmt.Sprintf("Cilium's %s pool (%q) can grow through its operator (CRD or ENI IPAM), up to a limit the agent does not show", family, rest)
		}
		cnt.Ranges = append(cnt.Ranges, r)
	}
	if len(cnt.Ranges) == 0 && cnt.Unknown == "" {
		cnt.Unknown = fmt.Sprintf("the Cilium agent's ipam status %q names no pool", status)
	}
	return cnt
}

// parseCiliumFamily reads one family's status: "N/M allocated from CIDR"
// (host-scope allocator) or "N/M allocated" (CRD allocator); grows is set
// for the latter.
func parseCiliumFamily(family, s string) (r Range, grows bool, err error) {
	counts, from, hasCIDR := strings.Cut(s, " allocated from ")
	if !hasCIDR {
		var ok bool
		if counts, ok = strings.CutSuffix(s, " allocated"); !ok {
			return Range{}, false, fmt.Errorf("the Cilium agent's %s status %q has no capacity (multi-pool IPAM, or IPAM delegated to a plugin): netready cannot tell when it runs out", family, s)
		}
	}
	used, capacity, ok := strings.Cut(counts, "/")
	n, err1 := strconv.ParseInt(used, 10, 64)
	m, ok2 := new(big.Int).SetString(capacity, 10)
	if !ok || err1 != nil || !ok2 || n < 0 || m.Sign() < 0 {
		return Range{}, false, fmt.Errorf("the Cilium agent's %s status %q: the count is not N/M", family, s)
	}
	r = Range{Set: family, Usable: m, Used: n}
	if hasCIDR {
		p, err := netip.ParsePrefix(from)
		if err != nil {
			return Range{}, false, fmt.Errorf("the Cilium agent's %s status %q: bad CIDR: %v", family, s, err)
		}
		r.Set = p.String()
	}
	return r, !hasCIDR, nil
}
