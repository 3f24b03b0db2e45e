package checks

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	rawnl "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/watch"
)

var nftFamilies = map[string]nftables.TableFamily{
	"ip": nftables.TableFamilyIPv4, "ip6": nftables.TableFamilyIPv6, "inet": nftables.TableFamilyINet,
	"arp": nftables.TableFamilyARP, "bridge": nftables.TableFamilyBridge, "netdev": nftables.TableFamilyNetdev,
}

// buildNFTables: a set check is made once per pod IP of the table's family;
// a rule check once, or per IP when match uses {{.IP}}.
func buildNFTables(cc *config.CheckConf, att *attachment.Attachment, env *Env) ([]Check, error) {
	fam := nftFamilies[cc.Family]
	if cc.Set != "" {
		var out []Check
		for _, ip := range att.IPs {
			v4 := ip.Address.IP.To4() != nil
			if (fam == nftables.TableFamilyIPv4 && !v4) || (fam == nftables.TableFamilyIPv6 && v4) {
				continue
			}
			table, set := cc.Table, cc.Set
			if err := expandAll(att.Placeholders(ip.Address.IP), &table, &set); err != nil {
				return nil, err
			}
			out = append(out, &nftSetCheck{env: env, family: cc.Family, fam: fam, table: table, set: set, ip: ip.Address.IP})
		}
		return out, nil
	}
	return perIP(cc, att, func(p config.Placeholders) (Check, error) {
		c := &nftRuleCheck{env: env, family: cc.Family, fam: fam, table: cc.Table, chain: cc.Chain, match: cc.Match}
		if err := expandAll(p, &c.table, &c.chain, &c.match); err != nil {
			return nil, err
		}
		return c, nil
	})
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
		if set.KeyType == nftables.TypeIPAddr || set.KeyType == nftables.TypeIP6Addr {
			// An IPv4 set cannot hold the pod's IPv6 address, nor the
			// reverse; the other family's set is another check.
			return true, "", nil
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
}

func (c *nftRuleCheck) Kind() string { return config.KindNFTables }
func (c *nftRuleCheck) Target() string {
	return fmt.Sprintf("chain %s/%s/%s contains %q", c.family, c.table, c.chain, c.match)
}
func (c *nftRuleCheck) Sources() []watch.Source { return []watch.Source{{Kind: watch.NFTables}} }

func (c *nftRuleCheck) Probe(context.Context) (bool, string, error) {
	var rules []*nftables.Rule
	err := c.env.withNFTables(func(conn *nftConns) error {
		var err error
		rules, err = conn.lib.GetRules(&nftables.Table{Name: c.table, Family: c.fam}, &nftables.Chain{Name: c.chain})
		return err
	})
	switch {
	case err != nil && isMissing(err):
		return false, "chain does not exist (yet)", nil
	case err != nil:
		return false, fmt.Sprintf("cannot list rules: %v", err), nil
	}
	for _, r := range rules {
		if ContainsToken(RenderRule(r), c.match) {
			return true, "", nil
		}
	}
	return false, "no rule matches yet", nil
}

// RenderRule writes a rule in nft's syntax for what a readiness match needs:
// addresses and ports compared, interface names, set lookups, verdicts and
// the comment, e.g. `ip saddr 10.1.0.5 counter accept comment "pod web-0"`.
// Expressions it does not know are left out.
func RenderRule(r *nftables.Rule) string {
	var parts []string
	field := ""
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case *expr.Meta:
			field = map[expr.MetaKey]string{expr.MetaKeyIIFNAME: "iifname", expr.MetaKeyOIFNAME: "oifname",
				expr.MetaKeyL4PROTO: "meta l4proto", expr.MetaKeyMARK: "meta mark"}[e.Key]
		case *expr.Payload:
			field = payloadField(e)
		case *expr.Cmp:
			op := map[expr.CmpOp]string{expr.CmpOpNeq: "!= ", expr.CmpOpLt: "< ", expr.CmpOpGt: "> ",
				expr.CmpOpLte: "<= ", expr.CmpOpGte: ">= "}[e.Op]
			parts = append(parts, strings.TrimSpace(field+" "+op+renderData(field, e.Data)))
			field = ""
		case *expr.Lookup:
			neg := ""
			if e.Invert {
				neg = "!= "
			}
			parts = append(parts, strings.TrimSpace(field+" "+neg+"@"+e.SetName))
			field = ""
		case *expr.Counter:
			parts = append(parts, "counter")
		case *expr.Verdict:
			parts = append(parts, renderVerdict(e))
		}
	}
	if comment, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok {
		parts = append(parts, fmt.Sprintf("comment %q", comment))
	}
	return strings.Join(parts, " ")
}

func payloadField(p *expr.Payload) string {
	switch p.Base {
	case expr.PayloadBaseNetworkHeader:
		switch {
		case p.Offset == 12 && p.Len == 4:
			return "ip saddr"
		case p.Offset == 16 && p.Len == 4:
			return "ip daddr"
		case p.Offset == 8 && p.Len == 16:
			return "ip6 saddr"
		case p.Offset == 24 && p.Len == 16:
			return "ip6 daddr"
		}
	case expr.PayloadBaseTransportHeader:
		switch {
		case p.Offset == 0 && p.Len == 2:
			return "th sport"
		case p.Offset == 2 && p.Len == 2:
			return "th dport"
		}
	}
	return ""
}

func renderData(field string, data []byte) string {
	switch {
	case strings.HasSuffix(field, "addr") && (len(data) == 4 || len(data) == 16):
		return net.IP(data).String()
	case strings.HasSuffix(field, "ifname"):
		return fmt.Sprintf("%q", string(bytes.TrimRight(data, "\x00")))
	case strings.HasSuffix(field, "port") && len(data) == 2:
		return fmt.Sprint(binary.BigEndian.Uint16(data))
	case len(data) == 4 || len(data) == 16:
		// An address compared after a mask or without a known field.
		return net.IP(data).String()
	}
	return fmt.Sprintf("0x%x", data)
}

func renderVerdict(v *expr.Verdict) string {
	switch v.Kind {
	case expr.VerdictAccept:
		return "accept"
	case expr.VerdictDrop:
		return "drop"
	case expr.VerdictReturn:
		return "return"
	case expr.VerdictJump:
		return "jump " + v.Chain
	case expr.VerdictGoto:
		return "goto " + v.Chain
	}
	return "continue"
}
