package checks

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/watch"
)

// FillIPs gives an attachment whose result listed no IP for its interface
// (some plugins leave an interface's sandbox field empty) the global
// addresses on that interface in the pod's netns. An attachment with IPs,
// or whose interface holds none, is left as it is: its per-IP checks then
// stay unmet (noIPCheck), never vacuously met. Only a netns that is gone is
// an error.
func FillIPs(att *attachment.Attachment, env *Env) error {
	if len(att.IPs) > 0 {
		return nil
	}
	h, err := env.PodHandle()
	if errors.Is(err, ErrNever) {
		return err
	}
	if err != nil {
		return nil // transient: the checks say what is missing
	}
	link, err := h.LinkByName(att.IfName)
	if err != nil {
		return nil
	}
	addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if a.Scope != unix.RT_SCOPE_UNIVERSE || a.IPNet == nil {
			continue
		}
		att.IPs = append(att.IPs, attachment.IP{Address: *a.IPNet})
	}
	return nil
}

// noIPCheck stands for a per-IP check of an attachment with no IP at all:
// "can't tell" is not met.
type noIPCheck struct {
	kind   string
	env    *Env
	ifName string
}

func (c *noIPCheck) Kind() string   { return c.kind }
func (c *noIPCheck) Target() string { return "(no pod IP)" }

// Sources: an address appearing is the only change worth a look, and it
// still leaves the check unmet (the checks were built without it); a
// stream keeps the wait from polling.
func (c *noIPCheck) Sources() []watch.Source {
	return []watch.Source{{Kind: watch.Addrs, NetNS: c.env.NetNS}}
}

func (c *noIPCheck) Probe(context.Context) (bool, string, error) {
	return false, fmt.Sprintf("no pod IP to check: the main plugin's result lists none for %s, and %s had no global address in the pod netns when ADD began; check that the plugin before netready returns the pod's IPs with their interface", c.ifName, c.ifName), nil
}
