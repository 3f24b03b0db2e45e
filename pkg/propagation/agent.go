package propagation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"time"

	"github.com/netready/netready/pkg/endpoint"
	"github.com/netready/netready/pkg/httpget"
)

// Agent is what the meter asks this node's cilium-agent.
type Agent interface {
	// NodeIPs are this node's addresses, as the agent knows its own node.
	NodeIPs(ctx context.Context) ([]netip.Addr, error)
	// Identity is the security identity the agent's ipcache maps ip to,
	// 0 when it maps it to none.
	Identity(ctx context.Context, ip netip.Addr) (int64, error)
}

// agentRequestTimeout bounds one question to the agent about one IP: a
// frozen or overloaded agent counts as late, not as a long wait.
const agentRequestTimeout = time.Second

// maxAgentBody bounds an answer of the agent about one IP.
const maxAgentBody = 1 << 20

// The agent's list of the cluster's nodes grows with the cluster (about
// 500 bytes a node): it is read once per watch session, so it may take
// longer and be larger.
const (
	nodesRequestTimeout = 10 * time.Second
	maxNodesBody        = 64 << 20
)

// SocketAgent asks a cilium-agent over its API socket (api/v1/openapi.yaml
// of cilium/cilium), through netready's one HTTP client.
type SocketAgent struct {
	client *httpget.Client
	host   string
	socket string
}

// NewSocketAgent asks the agent whose API listens on the unix socket at
// path.
func NewSocketAgent(path string) (*SocketAgent, error) {
	e, err := endpoint.Parse("unix://" + path)
	if err != nil {
		return nil, fmt.Errorf("cilium agent socket: %w", err)
	}
	return &SocketAgent{client: &httpget.Client{Dial: e.Dial}, host: e.Host, socket: path}, nil
}

// errNotFound: the agent answered 404.
var errNotFound = errors.New("not found")

// get sends GET target and decodes the JSON answer into v.
func (a *SocketAgent) get(ctx context.Context, target string, limit int, timeout time.Duration, v any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := a.client.Get(ctx, a.host, target, true, limit)
	switch {
	case err != nil:
		return fmt.Errorf("cilium agent at %s: %w", a.socket, err)
	case resp.StatusCode == 404:
		return errNotFound
	case resp.StatusCode != 200:
		return fmt.Errorf("cilium agent at %s: GET %s answered %s", a.socket, target, resp.Status)
	case len(resp.Body) > limit:
		return fmt.Errorf("cilium agent at %s: GET %s answered more than %d bytes", a.socket, target, limit)
	}
	if err := json.Unmarshal(resp.Body, v); err != nil {
		return fmt.Errorf("cilium agent at %s: GET %s: %w", a.socket, target, err)
	}
	return nil
}

// clusterNodes is what of GET /v1/cluster/nodes (ClusterNodeStatus) the
// meter reads: the agent's own node's name ("self") and each known
// node's addresses (NodeElement).
type clusterNodes struct {
	Self  string `json:"self"`
	Nodes []struct {
		Name           string `json:"name"`
		PrimaryAddress *struct {
			IPv4 *struct {
				IP string `json:"ip"`
			} `json:"ipv4"`
			IPv6 *struct {
				IP string `json:"ip"`
			} `json:"ipv6"`
		} `json:"primary-address"`
		SecondaryAddresses []struct {
			IP string `json:"ip"`
		} `json:"secondary-addresses"`
	} `json:"nodes-added"`
}

// NodeIPs reads the agent's own node's primary and secondary addresses.
func (a *SocketAgent) NodeIPs(ctx context.Context) ([]netip.Addr, error) {
	var doc clusterNodes
	if err := a.get(ctx, "/v1/cluster/nodes", maxNodesBody, nodesRequestTimeout, &doc); err != nil {
		return nil, err
	}
	return selfIPs(doc)
}

// selfIPs are the addresses of doc's own node.
func selfIPs(doc clusterNodes) ([]netip.Addr, error) {
	if doc.Self == "" {
		return nil, errors.New(`the agent's /v1/cluster/nodes names no "self" node`)
	}
	var ips []netip.Addr
	add := func(s string) {
		if ip, err := netip.ParseAddr(s); err == nil {
			ips = append(ips, ip.Unmap())
		}
	}
	for _, n := range doc.Nodes {
		if n.Name != doc.Self {
			continue
		}
		if p := n.PrimaryAddress; p != nil {
			if p.IPv4 != nil {
				add(p.IPv4.IP)
			}
			if p.IPv6 != nil {
				add(p.IPv6.IP)
			}
		}
		for _, s := range n.SecondaryAddresses {
			add(s.IP)
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("the agent's /v1/cluster/nodes has no address for its own node %q", doc.Self)
	}
	return ips, nil
}

// Identity asks GET /v1/ip?cidr=<ip>/<bits> (a list of IPListEntry; 404
// when the ipcache has none).
func (a *SocketAgent) Identity(ctx context.Context, ip netip.Addr) (int64, error) {
	prefix := netip.PrefixFrom(ip, ip.BitLen())
	var entries []struct {
		CIDR     string `json:"cidr"`
		Identity int64  `json:"identity"`
	}
	err := a.get(ctx, "/v1/ip?cidr="+url.QueryEscape(prefix.String()), maxAgentBody, agentRequestTimeout, &entries)
	if errors.Is(err, errNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if p, err := netip.ParsePrefix(e.CIDR); err == nil && p.Masked() == prefix {
			return e.Identity, nil
		}
	}
	return 0, nil
}
