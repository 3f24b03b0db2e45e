package checks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/coreos/go-iptables/iptables"
	"github.com/google/nftables"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/nftrule"
	"github.com/netready/netready/pkg/watch"
)

var _ Check = (*iptablesCheck)(nil)

// buildIPTables makes a rule check once, or per pod IP when its strings
// use {{.IP}}.
func buildIPTables(in []instance, att *attachment.Attachment, env *Env) ([]Check, error) {
	return each(in, func(in *instance) (Check, error) {
		podIP := ""
		if in.ip != nil {
			podIP = in.ip.Address.IP.String()
		}
		return &iptablesCheck{env: env, proto: iptablesFamily(podIP, att), table: in.conf.Table, chain: in.conf.Chain,
			match: in.conf.Match, rule: nftrule.IPTables(in.conf.Match)}, nil
	})
}

// iptablesFamily: ip6tables for an IPv6 pod IP; for a check not made per
// IP, ip6tables only when the pod has IPv6 addresses and no IPv4 one.
func iptablesFamily(podIP string, att *attachment.Attachment) iptables.Protocol {
	if ip := net.ParseIP(podIP); ip != nil {
		if ip.To4() == nil {
			return iptables.ProtocolIPv6
		}
		return iptables.ProtocolIPv4
	}
	for _, ip := range att.IPs {
		if ip.Address.IP.To4() != nil {
			return iptables.ProtocolIPv4
		}
	}
	if len(att.IPs) > 0 {
		return iptables.ProtocolIPv6
	}
	return iptables.ProtocolIPv4
}

// iptablesCheck: a rule of table/chain contains match at token boundaries.
type iptablesCheck struct {
	env                 *Env
	proto               iptables.Protocol
	table, chain, match string
	// rule is match as iptables-nft's rules are read through netlink.
	rule nftrule.Match
}

func (c *iptablesCheck) Kind() string { return config.KindIPTables }

func (c *iptablesCheck) Target() string {
	cmd := "iptables"
	if c.proto == iptables.ProtocolIPv6 {
		cmd = "ip6tables"
	}
	return fmt.Sprintf("%s %s/%s contains %q", cmd, c.table, c.chain, c.match)
}

// Sources: with the nf_tables backend, iptables rules are nftables objects
// and their changes arrive as nftables notifications, filtered to new rules
// of the check's chain; the legacy backend has no events, so the check is
// polled.
func (c *iptablesCheck) Sources() []watch.Source {
	if c.env.iptablesIsNFT() {
		return []watch.Source{ruleSource(c.nftFamily(), c.table, c.chain, c.rule)}
	}
	return nil
}

// nftFamily is the nftables family that iptables-nft keeps the rules in.
func (c *iptablesCheck) nftFamily() nftables.TableFamily {
	if c.proto == iptables.ProtocolIPv6 {
		return nftables.TableFamilyIPv6
	}
	return nftables.TableFamilyIPv4
}

// Probe: with iptables-nft and an address match ("-s 10.1.0.5/32"), the
// chain's rules are read through nftables netlink; any other match, or
// legacy iptables, runs iptables.
func (c *iptablesCheck) Probe(ctx context.Context) (bool, string, error) {
	if c.rule.Decidable() && c.env.iptablesIsNFT() {
		ok, why := c.env.chainHolds(c.nftFamily(), c.table, c.chain, c.rule)
		return ok, why, nil
	}
	ipt, err := c.env.IPTables(ctx, c.proto)
	if err != nil {
		return false, err.Error(), nil
	}
	rules, err := ipt.List(c.table, c.chain)
	if err != nil {
		// iptables-nft 1.8.9 calls a missing chain "incompatible", which
		// go-iptables does not read as "not exist"; ask, on this path only.
		var e *iptables.Error
		if errors.As(err, &e) && e.IsNotExist() {
			return false, fmt.Sprintf("chain %s/%s does not exist (yet)", c.table, c.chain), nil
		}
		if exists, cerr := ipt.ChainExists(c.table, c.chain); cerr == nil && !exists {
			return false, fmt.Sprintf("chain %s/%s does not exist (yet)", c.table, c.chain), nil
		}
		return false, fmt.Sprintf("cannot list %s/%s: %v", c.table, c.chain, strings.TrimSpace(err.Error())), nil
	}
	for _, r := range rules {
		if nftrule.ContainsToken(r, c.match) {
			return true, "", nil
		}
	}
	return false, "no rule matches yet", nil
}
