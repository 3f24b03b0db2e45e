package checks

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/watch"
)

// The datapath kinds are made once per pod IP and ask the kernel only.
var (
	_ Check = (*addressCheck)(nil)
	_ Check = (*routeCheck)(nil)
	_ Check = (*gatewayCheck)(nil)
)

func buildAddress(in []instance, att *attachment.Attachment, env *Env) ([]Check, error) {
	return each(in, func(in *instance) (Check, error) {
		return &addressCheck{env: env, ifName: att.IfName, ip: in.ip.Address.IP}, nil
	})
}

func buildRoute(in []instance, _ *attachment.Attachment, _ *Env) ([]Check, error) {
	return each(in, func(in *instance) (Check, error) {
		return &routeCheck{ip: in.ip.Address.IP}, nil
	})
}

// buildGateway checks the gateway of each pod IP that has one; it can
// never be met when none has.
func buildGateway(in []instance, att *attachment.Attachment, env *Env) ([]Check, error) {
	var out []Check
	for _, i := range in {
		if i.ip.Gateway != nil {
			out = append(out, &gatewayCheck{env: env, ifName: att.IfName, gw: i.ip.Gateway})
		}
	}
	if len(out) == 0 {
		return nil, never("the result gives no gateway for any pod IP")
	}
	return out, nil
}

// addressCheck: the pod IP is on the sandbox interface, the link is up and
// the address has finished duplicate address detection.
type addressCheck struct {
	env    *Env
	ifName string
	ip     net.IP // nil: only the link is checked
}

func (c *addressCheck) Kind() string { return config.KindAddress }

func (c *addressCheck) Target() string {
	if c.ip == nil {
		return c.ifName
	}
	return c.ip.String()
}

func (c *addressCheck) Sources() []watch.Source {
	return []watch.Source{{Kind: watch.Links, NetNS: c.env.NetNS}, {Kind: watch.Addrs, NetNS: c.env.NetNS}}
}

func (c *addressCheck) Probe(context.Context) (bool, string, error) {
	h, err := c.env.PodHandle()
	if err != nil {
		return false, "", err
	}
	link, err := h.LinkByName(c.ifName)
	if err != nil {
		return false, fmt.Sprintf("interface %s not found in the pod netns", c.ifName), nil
	}
	attrs := link.Attrs()
	if attrs.Flags&net.FlagUp == 0 {
		return false, fmt.Sprintf("interface %s is down", c.ifName), nil
	}
	if attrs.RawFlags&unix.IFF_LOWER_UP == 0 {
		return false, fmt.Sprintf("interface %s has no carrier", c.ifName), nil
	}
	if c.ip == nil {
		return true, "", nil
	}
	addrs, err := h.AddrList(link, family(c.ip))
	if err != nil {
		return false, fmt.Sprintf("cannot list addresses of %s: %v", c.ifName, err), nil
	}
	for _, a := range addrs {
		if !a.IP.Equal(c.ip) {
			continue
		}
		switch {
		case a.Flags&unix.IFA_F_DADFAILED != 0:
			return false, "", never("duplicate address detection failed for %s on %s", c.ip, c.ifName)
		case a.Flags&unix.IFA_F_TENTATIVE != 0:
			return false, fmt.Sprintf("%s on %s is tentative (duplicate address detection running)", c.ip, c.ifName), nil
		}
		return true, "", nil
	}
	return false, fmt.Sprintf("%s is not on %s", c.ip, c.ifName), nil
}

// routeCheck: in the host netns, the pod IP resolves through a route more
// specific than the default route.
type routeCheck struct {
	ip net.IP
}

func (c *routeCheck) Kind() string            { return config.KindRoute }
func (c *routeCheck) Target() string          { return c.ip.String() }
func (c *routeCheck) Sources() []watch.Source { return []watch.Source{{Kind: watch.Routes}} }

func (c *routeCheck) Probe(context.Context) (bool, string, error) {
	// FIB match returns the matching table entry, with its prefix length,
	// rather than a /32 host result.
	routes, err := netlink.RouteGetWithOptions(c.ip, &netlink.RouteGetOptions{FIBMatch: true})
	switch {
	case errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EHOSTUNREACH):
		return false, "no route in the host netns", nil
	case err != nil:
		return false, fmt.Sprintf("route lookup failed: %v", err), nil
	case len(routes) == 0:
		return false, "no route in the host netns", nil
	}
	r := routes[0]
	if r.Dst == nil {
		return false, "only the default route matches", nil
	}
	if ones, _ := r.Dst.Mask.Size(); ones == 0 {
		return false, "only the default route matches", nil
	}
	if r.Type != unix.RTN_UNICAST && r.Type != unix.RTN_LOCAL {
		return false, fmt.Sprintf("route %s is of type %d (blackhole, unreachable or prohibit)", r.Dst, r.Type), nil
	}
	return true, "", nil
}

// gatewayCheck: the gateway answers ARP or neighbour discovery from the pod.
type gatewayCheck struct {
	env    *Env
	ifName string
	gw     net.IP
}

func (c *gatewayCheck) Kind() string   { return config.KindGateway }
func (c *gatewayCheck) Target() string { return c.gw.String() }

func (c *gatewayCheck) Sources() []watch.Source {
	return []watch.Source{{Kind: watch.Neighs, NetNS: c.env.NetNS}, {Kind: watch.Links, NetNS: c.env.NetNS}}
}

// resolved are the states in which the kernel holds an answer.
const resolved = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT

func (c *gatewayCheck) Probe(context.Context) (bool, string, error) {
	h, err := c.env.PodHandle()
	if err != nil {
		return false, "", err
	}
	link, err := h.LinkByName(c.ifName)
	if err != nil {
		return false, fmt.Sprintf("interface %s not found in the pod netns", c.ifName), nil
	}
	neighs, err := h.NeighList(link.Attrs().Index, family(c.gw))
	if err != nil {
		return false, fmt.Sprintf("cannot list neighbours: %v", err), nil
	}
	for _, n := range neighs {
		if !n.IP.Equal(c.gw) {
			continue
		}
		if n.State&resolved != 0 && len(n.HardwareAddr) > 0 {
			return true, "", nil
		}
		if n.State&netlink.NUD_INCOMPLETE != 0 {
			return false, "no answer to ARP/neighbour solicitation yet", nil
		}
	}
	// Ask the kernel to resolve, as if it had a packet to send; its answer
	// arrives as a neighbour event. No data packet leaves the pod.
	err = h.NeighSet(&netlink.Neigh{LinkIndex: link.Attrs().Index, Family: family(c.gw), IP: c.gw, Flags: netlink.NTF_USE})
	if err != nil {
		return false, fmt.Sprintf("cannot start neighbour resolution: %v", err), nil
	}
	return false, "no answer to ARP/neighbour solicitation yet", nil
}

func family(ip net.IP) int {
	if ip.To4() != nil {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}
