// Package nftrule owns what netready reads in an nftables rule: a rule's
// comparisons as terms, rendered in nft's syntax for text matches; the rules
// that nftables notifications carry; and the iptables match forms that
// iptables-nft stores as plain nftables expressions ("-s 10.1.0.5/32"), so
// that iptables-nft rules are read through netlink instead of by running
// iptables.
package nftrule

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/google/nftables/xt"
)

// term is one part of a rule: a comparison of a field, a set lookup, a
// counter or a verdict. text is the part in nft's syntax.
type term struct {
	text string
	// For an address comparison (field "ip saddr", "ip6 daddr", ...):
	// the network in nft's form ("10.1.0.5", "10.2.0.0/16") and whether
	// the comparison is negated.
	field   string
	network string
	negated bool
	// comment: the text of an xtables comment match (iptables-nft's
	// "-m comment"), which `iptables -S` prints.
	comment string
}

// operand is what a rule's next comparison compares: a field of the
// packet, and for an address, its length and the prefix that a shorter
// load or a mask leaves of it.
type operand struct {
	field   string
	addrLen int // 4 or 16 for an address, else 0
	loaded  int // how many of its bytes were loaded
	bits    int // the prefix length of an address
}

var metaFields = map[expr.MetaKey]string{expr.MetaKeyIIFNAME: "iifname", expr.MetaKeyOIFNAME: "oifname",
	expr.MetaKeyL4PROTO: "meta l4proto", expr.MetaKeyMARK: "meta mark"}

var cmpOps = map[expr.CmpOp]string{expr.CmpOpNeq: "!= ", expr.CmpOpLt: "< ", expr.CmpOpGt: "> ",
	expr.CmpOpLte: "<= ", expr.CmpOpGte: ">= "}

// terms walks a rule's expressions in order. A nil expression (one that
// a notification carried but this package does not decode) ends what the
// walk knew of the operand, as any expression it does not render does.
func terms(r *nftables.Rule) []term {
	fam := nftables.TableFamilyUnspecified
	if r.Table != nil {
		fam = r.Table.Family
	}
	var out []term
	var op operand
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case *expr.Meta:
			op = operand{field: metaFields[e.Key]}
		case *expr.Payload:
			op = payloadOperand(fam, e)
		case *expr.Bitwise:
			op = op.masked(e)
		case *expr.Cmp:
			out = append(out, op.compare(e))
			op = operand{}
		case *expr.Lookup:
			neg := ""
			if e.Invert {
				neg = "!= "
			}
			out = append(out, term{text: strings.TrimSpace(op.field + " " + neg + "@" + e.SetName)})
			op = operand{}
		case *expr.Counter:
			out = append(out, term{text: "counter"})
		case *expr.Verdict:
			out = append(out, term{text: renderVerdict(e)})
		case *expr.Match:
			if c, ok := e.Info.(*xt.Comment); ok {
				out = append(out, term{comment: string(*c)})
			}
			op = operand{}
		default:
			op = operand{}
		}
	}
	return out
}

// Render writes a rule in nft's syntax for what a readiness match needs:
// addresses (with their prefix) and ports compared, interface names, set
// lookups, verdicts and the comment, e.g.
// `ip saddr 10.1.0.5 counter accept comment "pod web-0"`. Expressions it
// does not know are left out.
func Render(r *nftables.Rule) string {
	var parts []string
	for _, t := range terms(r) {
		if t.text != "" {
			parts = append(parts, t.text)
		}
	}
	if comment, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok {
		parts = append(parts, fmt.Sprintf("comment %q", comment))
	}
	return strings.Join(parts, " ")
}

// payloadOperand names a load from the packet. nft loads only the bytes of
// an address that a byte-aligned prefix covers (a /16 loads two), so a
// short load at an address's offset is that address's prefix. Offsets of
// IPv4 and IPv6 headers overlap: the table's family, or a length only the
// other header's field could have, tells them apart.
func payloadOperand(fam nftables.TableFamily, p *expr.Payload) operand {
	n := int(p.Len)
	v4 := fam != nftables.TableFamilyIPv6
	v6 := fam != nftables.TableFamilyIPv4
	switch p.Base {
	case expr.PayloadBaseNetworkHeader:
		switch {
		case p.Offset == 12 && n >= 1 && n <= 4 && v4:
			return operand{field: "ip saddr", addrLen: 4, loaded: n, bits: 8 * n}
		case p.Offset == 16 && n >= 1 && n <= 4 && v4:
			return operand{field: "ip daddr", addrLen: 4, loaded: n, bits: 8 * n}
		case p.Offset == 8 && n >= 1 && n <= 16 && v6 && (n > 4 || fam == nftables.TableFamilyIPv6):
			return operand{field: "ip6 saddr", addrLen: 16, loaded: n, bits: 8 * n}
		case p.Offset == 24 && n >= 1 && n <= 16 && v6:
			return operand{field: "ip6 daddr", addrLen: 16, loaded: n, bits: 8 * n}
		}
	case expr.PayloadBaseTransportHeader:
		switch {
		case p.Offset == 0 && n == 2:
			return operand{field: "th sport"}
		case p.Offset == 2 && n == 2:
			return operand{field: "th dport"}
		}
	}
	return operand{}
}

// masked applies a bitwise AND to an address: a mask of leading ones (and
// no XOR) is a prefix; anything else is no longer an address nft would
// print as one.
func (o operand) masked(b *expr.Bitwise) operand {
	if o.addrLen == 0 || int(b.Len) != o.loaded || len(b.Mask) != o.loaded {
		return operand{}
	}
	for _, x := range b.Xor {
		if x != 0 {
			return operand{}
		}
	}
	ones, rest := 0, false
	for _, m := range b.Mask {
		if rest && m != 0 {
			return operand{}
		}
		lead := bits.LeadingZeros8(^m)
		if m<<lead != 0 {
			return operand{}
		}
		ones += lead
		rest = rest || lead < 8
	}
	o.bits = ones
	return o
}

// compare renders a comparison of the operand.
func (o operand) compare(c *expr.Cmp) term {
	t := term{}
	value := renderData(o.field, c.Data)
	if o.addrLen != 0 && len(c.Data) == o.loaded && (c.Op == expr.CmpOpEq || c.Op == expr.CmpOpNeq) {
		addr := make(net.IP, o.addrLen)
		copy(addr, c.Data)
		value = addr.String()
		if o.bits < 8*o.addrLen {
			value += fmt.Sprintf("/%d", o.bits)
		}
		t.field, t.network, t.negated = o.field, value, c.Op == expr.CmpOpNeq
	}
	t.text = strings.TrimSpace(o.field + " " + cmpOps[c.Op] + value)
	return t
}

func renderData(field string, data []byte) string {
	switch {
	case strings.HasSuffix(field, "addr") && (len(data) == 4 || len(data) == 16):
		return net.IP(data).String()
	case strings.HasSuffix(field, "ifname"):
		return fmt.Sprintf("%q", strings.TrimRight(string(data), "\x00"))
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
