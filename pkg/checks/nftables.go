package checks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/google/nftables"
	rawnl "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/nftrule"
	"github.com/netready/netready/pkg/watch"
)

var nftFamilies = map[string]nftables.TableFamily{
	"ip": nftables.TableFamilyIPv4, "ip6": nftables.TableFamilyIPv6, "inet": nftables.TableFamilyINet,
	"arp": nftables.TableFamilyARP, "bridge": nftables.TableFamilyBridge, "netdev": nftables.TableFamilyNetdev,
}

var (
	_ Check = (*nftSetCheck)(nil)
	_ Check = (*nftRuleCheck)(nil)
)

// nftPerIP: a set check is made once per pod IP.
func nftPerIP(cc *config.CheckConf) bool { return cc.Set != "" }

// buildNFTables: a set check is made once per pod IP of the table's family;
// a rule check once, or per IP when match uses {{.IP}}.
func buildNFTables(in []instance, att *attachment.Attachment, env *Env) ([]Check, error) {
	if in[0].conf.Set == "" {
		return each(in, func(in *instance) (Check, error) {
			cc := &in.conf
			return &nftRuleCheck{env: env, family: cc.Family, fam: nftFamilies[cc.Family], table: cc.Table, chain: cc.Chain,
				match: cc.Match, rule: nftrule.NFTText(cc.Match)}, nil
		})
	}
	var hasV4, hasV6 bool
	for _, ip := range att.IPs {
		v4 := ip.Address.IP.To4() != nil
		hasV4, hasV6 = hasV4 || v4, hasV6 || !v4
	}
	var out []Check
	for _, i := range in {
		fam := nftFamilies[i.conf.Family]
		ip := i.ip.Address.IP
		v4 := ip.To4() != nil
		if (fam == nftables.TableFamilyIPv4 && !v4) || (fam == nftables.TableFamilyIPv6 && v4) {
			continue
		}
		out = append(out, &nftSetCheck{env: env, family: i.conf.Family, fam: fam, table: i.conf.Table, set: i.conf.Set, ip: ip,
			hasV4: hasV4, hasV6: hasV6})
	}
	if len(out) == 0 {
		// An ip6 table for an IPv4-only pod (or the reverse) can never
		// hold one of its addresses.
		c := &in[0].conf
		return nil, never("set %s/%s/%s is of family %s, and the pod has no address of that family (it has %s)",
			c.Family, c.Table, c.Set, c.Family, strings.Join(att.IPStrings(), ", "))
	}
	return out, nil
}

// isMissing reports a table, chain or set that does not exist (yet).
func isMissing(err error) bool {
	return errors.Is(err, unix.ENOENT) || strings.Contains(err.Error(), "no such file or directory")
}

// nftSetCheck: the set holds the pod IP, as an element or inside an
// interval.
type nftSetCheck struct {
	env                *Env
	family, table, set string
	fam                nftables.TableFamily
	ip                 net.IP
	// The pod's address families: a set keyed on the other family than
	// ip is met only where the pod has an address of that family, which
	// its own check then judges.
	hasV4, hasV6 bool
}

func (c *nftSetCheck) Kind() string { return config.KindNFTables }
func (c *nftSetCheck) Target() string {
	return fmt.Sprintf("set %s/%s/%s has %s", c.family, c.table, c.set, c.ip)
}

// Sources: only element changes of this set can add the IP, and the
// notification of one that does is itself the answer.
func (c *nftSetCheck) Sources() []watch.Source {
	return []watch.Source{{Kind: watch.NFTSet, Element: watch.NFTElement{
		Family: uint8(c.fam), Table: c.table, Set: c.set, Key: string(ipKey(c.ip)),
	}}}
}

// ipKey is an IP as an nftables set stores it: 4 bytes for IPv4.
func ipKey(ip net.IP) []byte {
	if v4 := ip.To4(); v4 != nil {
		return v4
	}
	return ip.To16()
}

func (c *nftSetCheck) Probe(context.Context) (bool, string, error) {
	key := ipKey(c.ip)
	var (
		set  *nftables.Set
		held bool
	)
	err := c.env.withNFTables(func(conn *nftConns) error {
		var err error
		if set, err = conn.lib.GetSetByName(&nftables.Table{Name: c.table, Family: c.fam}, c.set); err != nil {
			return fmt.Errorf("cannot read set: %w", err)
		}
		if set.KeyType.Bytes != uint32(len(key)) {
			return nil
		}
		if !set.Interval {
			held, err = hasElement(conn.raw, c.fam, c.table, c.set, key)
			if err == nil || !errors.Is(err, unix.EOPNOTSUPP) {
				return err
			}
			// A kernel without single-element lookups: read them all.
		}
		elems, err := conn.lib.GetSetElements(set)
		if err != nil {
			return fmt.Errorf("cannot read set elements: %w", err)
		}
		held = setHolds(elems, set.Interval, key)
		return nil
	})
	switch {
	case err != nil && isMissing(err):
		return false, "set does not exist (yet)", nil
	case err != nil:
		return false, err.Error(), nil
	}
	if set.KeyType.Bytes != uint32(len(key)) {
		switch {
		case set.KeyType == nftables.TypeIPAddr && c.hasV4, set.KeyType == nftables.TypeIP6Addr && c.hasV6:
			// An IPv4 set cannot hold the pod's IPv6 address, nor the
			// reverse; the pod's address of the set's family has its
			// own check.
			return true, "", nil
		case set.KeyType == nftables.TypeIPAddr:
			return false, "", never("set %s holds IPv4 addresses, and the pod has none", c.set)
		case set.KeyType == nftables.TypeIP6Addr:
			return false, "", never("set %s holds IPv6 addresses, and the pod has none", c.set)
		}
		return false, "", never("set %s has key type %s, not an IP address", c.set, set.KeyType.Name)
	}
	if held {
		return true, "", nil
	}
	return false, "IP not in the set yet", nil
}

// hasElement asks the kernel whether a plain set holds key, as `nft get
// element` does: one lookup rather than a dump of every element, which for
// a set of 60,000 addresses takes hundreds of milliseconds. The kernel
// answers with the element, or ENOENT.
func hasElement(conn *rawnl.Conn, fam nftables.TableFamily, table, set string, key []byte) (bool, error) {
	ae := rawnl.NewAttributeEncoder()
	ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, table)
	ae.String(unix.NFTA_SET_ELEM_LIST_SET, set)
	ae.Nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(ae *rawnl.AttributeEncoder) error {
		ae.Nested(unix.NFTA_LIST_ELEM, func(ae *rawnl.AttributeEncoder) error {
			ae.Nested(unix.NFTA_SET_ELEM_KEY, func(ae *rawnl.AttributeEncoder) error {
				ae.Bytes(unix.NFTA_DATA_VALUE, key)
				return nil
			})
			return nil
		})
		return nil
	})
	data, err := ae.Encode()
	if err != nil {
		return false, err
	}
	// No Acknowledge flag: the answer is the element or an error, never
	// both, so no ack is left behind for the next request to read.
	_, err = conn.Execute(rawnl.Message{
		Header: rawnl.Header{Type: rawnl.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETSETELEM), Flags: rawnl.Request},
		Data:   append([]byte{byte(fam), unix.NFNETLINK_V0, 0, 0}, data...),
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("cannot look up the element: %w", err)
}

// setHolds looks key up among plain elements, or, for interval sets, in
// [start, end) ranges the kernel returns as start and end elements.
func setHolds(elems []nftables.SetElement, interval bool, key []byte) bool {
	if !interval {
		for _, e := range elems {
			if bytes.Equal(e.Key, key) {
				return true
			}
		}
		return false
	}
	slices.SortFunc(elems, func(a, b nftables.SetElement) int { return bytes.Compare(a.Key, b.Key) })
	var start []byte
	for _, e := range elems {
		if e.IntervalEnd {
			if start != nil && bytes.Compare(key, start) >= 0 && bytes.Compare(key, e.Key) < 0 {
				return true
			}
			start = nil
			continue
		}
		if start != nil && bytes.Compare(key, start) >= 0 && bytes.Compare(key, e.Key) < 0 {
			return true
		}
		start = e.Key
	}
	return start != nil && bytes.Compare(key, start) >= 0
}

// nftRuleCheck: a rule of the chain, rendered as text, contains match at
// token boundaries.
type nftRuleCheck struct {
	env                         *Env
	family, table, chain, match string
	fam                         nftables.TableFamily
	rule                        nftrule.Match
}

func (c *nftRuleCheck) Kind() string { return config.KindNFTables }
func (c *nftRuleCheck) Target() string {
	return fmt.Sprintf("chain %s/%s/%s contains %q", c.family, c.table, c.chain, c.match)
}

func (c *nftRuleCheck) Sources() []watch.Source {
	return []watch.Source{ruleSource(c.fam, c.table, c.chain, c.rule)}
}

func (c *nftRuleCheck) Probe(context.Context) (bool, string, error) {
	ok, why := c.env.chainHolds(c.fam, c.table, c.chain, c.rule)
	return ok, why, nil
}

// ruleSource wakes a rule check only for a transaction that added a rule
// to its chain that matches, or may.
func ruleSource(fam nftables.TableFamily, table, chain string, m nftrule.Match) watch.Source {
	return watch.Source{Kind: watch.NFTRule, Rule: watch.NFTRuleMatch{Family: uint8(fam), Table: table, Chain: chain, Match: m}}
}

// chainHolds reads one chain's rules (never the whole ruleset) and reports
// whether one matches m, or why not. A rule is decoded only when its raw
// attributes may hold a match: in a storm, the chain holds every other
// pod's rule, and decoding them all on each safety re-check would be most
// of a waiting rule check's CPU (docs/benchmarks.md).
func (e *Env) chainHolds(fam nftables.TableFamily, table, chain string, m nftrule.Match) (bool, string) {
	var (
		held   bool
		unread error
	)
	err := e.withNFTables(func(conn *nftConns) error {
		rules, err := dumpRules(conn.raw, fam, table, chain)
		if err != nil || len(rules) == 0 {
			if err == nil {
				// A dump of a chain that does not exist is empty, not
				// an error.
				_, err = conn.lib.ListChain(&nftables.Table{Name: table, Family: fam}, chain)
			}
			return err
		}
		for _, msg := range rules {
			if len(msg.Data) < 4 || m.Excludes(msg.Data[4:]) {
				continue
			}
			r, err := nftrule.Decode(byte(fam), msg.Data[4:])
			if err != nil {
				unread = err
				continue
			}
			if m.In(r) {
				held = true
				return nil
			}
		}
		return nil
	})
	switch {
	case err != nil && isMissing(err):
		return false, fmt.Sprintf("chain %s/%s does not exist (yet)", table, chain)
	case err != nil:
		return false, fmt.Sprintf("cannot list the rules of %s/%s: %v", table, chain, err)
	case held:
		return true, ""
	case unread != nil:
		return false, fmt.Sprintf("no rule matches yet, and a rule of %s/%s cannot be read: %v", table, chain, unread)
	}
	return false, "no rule matches yet"
}

// dumpRules asks the kernel for one chain's rules, raw.
func dumpRules(conn *rawnl.Conn, fam nftables.TableFamily, table, chain string) ([]rawnl.Message, error) {
	ae := rawnl.NewAttributeEncoder()
	ae.String(unix.NFTA_RULE_TABLE, table)
	ae.String(unix.NFTA_RULE_CHAIN, chain)
	data, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	msgs, err := conn.Execute(rawnl.Message{
		Header: rawnl.Header{Type: rawnl.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE), Flags: rawnl.Request | rawnl.Dump},
		Data:   append([]byte{byte(fam), unix.NFNETLINK_V0, 0, 0}, data...),
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list rules: %w", err)
	}
	return msgs, nil
}
