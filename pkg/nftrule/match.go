package nftrule

import (
	"bytes"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables"
)

// Match is a check's match against the rules of a chain. It is a value, so
// that an event source holding one stays comparable.
type Match struct {
	text string
	// iptables: text is an iptables rule fragment, as `iptables -S` prints
	// rules. decidable: it is an address form read from the expressions.
	iptables, decidable bool
	// The address form "[! ]-s|-d ADDR[/LEN]": the term's field ("ip
	// saddr", "ip6 daddr", ...), the address as written, and the length
	// as written ("" matches any, as "-s ADDR" matches "-s ADDR/LEN");
	// fullLen is what iptables prints for a host address, "32" or "128".
	negated             bool
	field, addr, prefix string
	fullLen             string
	// needle is the bytes of an address the match names and literal its
	// text: a rule that matches holds one or the other, as a compare's
	// data or in a comment. "" when the match names no address.
	needle, literal string
}

// NFTText matches rules whose Render contains text at token boundaries.
func NFTText(text string) Match {
	m := Match{text: text, decidable: true}
	for _, tok := range strings.Fields(text) {
		addr, _, _ := strings.Cut(tok, "/")
		if a, err := netip.ParseAddr(addr); err == nil && a.Zone() == "" {
			m.needle, m.literal = string(a.AsSlice()), addr
			break
		}
	}
	return m
}

// IPTables matches what `iptables -S` prints of a rule, text at token
// boundaries. Only the address forms "-s ADDR[/LEN]" and "-d ADDR[/LEN]",
// negated or not, can be decided from a rule's expressions; for any other
// text Decidable is false and the rules must be read by iptables itself.
// Decided on the expressions, the form matches where `iptables -S` text
// would: the rule's address comparison, or a comment holding the form.
func IPTables(text string) Match {
	m := Match{text: text, iptables: true}
	rest, neg := strings.CutPrefix(text, "! ")
	flag, arg, ok := strings.Cut(rest, " ")
	if !ok || (flag != "-s" && flag != "-d") {
		return m
	}
	addr, bits, hasLen := strings.Cut(arg, "/")
	a, err := netip.ParseAddr(addr)
	if err != nil || a.Zone() != "" || a.Is4In6() || v4Compatible(a) {
		return m
	}
	if hasLen {
		n, err := strconv.Atoi(bits)
		if err != nil || bits != strconv.Itoa(n) || n < 0 || n > a.BitLen() {
			return m
		}
		m.prefix = bits
	}
	m.field, m.fullLen = "ip saddr", "32"
	if a.Is6() {
		m.field, m.fullLen = "ip6 saddr", "128"
	}
	if flag == "-d" {
		m.field = strings.Replace(m.field, "saddr", "daddr", 1)
	}
	m.decidable, m.negated, m.addr = true, neg, addr
	m.needle, m.literal = string(a.AsSlice()), addr
	return m
}

// Excludes reports, from a rule message's raw attributes alone, that the
// rule cannot match: the match names an address, and neither its bytes
// nor its text are anywhere in the message. Render prints an address
// from its bytes and a comment as written, so a rule that matches holds
// one of them; this spares decoding the rules of other pods.
func (m Match) Excludes(msg []byte) bool {
	return m.needle != "" && !bytes.Contains(msg, []byte(m.needle)) && !bytes.Contains(msg, []byte(m.literal))
}

// Decidable reports whether In can decide the match from a rule.
func (m Match) Decidable() bool { return m.decidable }

// In reports whether rule r matches. It is only meaningful when the match
// is Decidable.
func (m Match) In(r *nftables.Rule) bool {
	if !m.iptables {
		return ContainsToken(Render(r), m.text)
	}
	if !m.decidable {
		return false
	}
	for _, t := range terms(r) {
		if t.comment != "" && ContainsToken(t.comment, m.text) {
			return true
		}
		if t.field != m.field || (m.negated && !t.negated) {
			continue
		}
		// iptables prints every address with its length ("-s
		// 10.1.0.5/32"), and the network's bits only.
		network, bits, hasLen := strings.Cut(t.network, "/")
		if !hasLen {
			bits = m.fullLen
		}
		if network == m.addr && (m.prefix == "" || m.prefix == bits) {
			return true
		}
	}
	return false
}

// v4Compatible: an IPv6 address that inet_ntop, and so ip6tables, prints
// with a dotted IPv4 tail ("::10.1.0.5") where Go prints hex groups.
func v4Compatible(a netip.Addr) bool {
	if !a.Is6() {
		return false
	}
	b := a.As16()
	for _, x := range b[:12] {
		if x != 0 {
			return false
		}
	}
	return b[12] != 0 || b[13] != 0
}
