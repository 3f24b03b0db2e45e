package pool

import (
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/netready/netready/pkg/config"
)

// The condition's message is for a person first (kubectl describe node),
// and kubectl netready reads it back: it is the only place, among what the
// sidecar may write, that names each pool. The pool watch writes one part
// per network, joined by "; ":
//
//	NETWORK[ (SOURCE)]: N of M addresses in use[, K cooling down][ in SET][, ...][; the source can add addresses] (minFree F)[, exhausted][ (NOTE)]
//	NETWORK[ (SOURCE)][: N of M addresses in use...]; held: can't tell since TIME: WHY (minFree F)[, exhausted when last counted][ (NOTE)]
//
// SOURCE is status.ipam's type, left out for host-local; network names are
// CNI's ([A-Za-z0-9][A-Za-z0-9_.-]*); TIME is RFC 3339, UTC. Older
// sidecars wrote "; cannot tell: WHY" and "NETWORK[ (SOURCE)]: cannot
// count: WHY" for a pool that can't tell, and lifted its taint: both
// still read back.

// ExhaustedMark follows "(minFree F)" in the part of a network whose pool
// the sidecar judges exhausted (hysteresis included): the taint, or
// STATUS's failure with poolAction "notready", is that network's doing.
const ExhaustedMark = ", exhausted"

// HeldMark ended an older sidecar's "cannot count" part of a network
// whose source was still syncing: the taint stayed as it was.
const HeldMark = "the taint is neither added nor lifted until it has"

// heldAt starts the verdict of a network that can't tell: its last
// verdict, and so the taint, stands until it can.
const heldAt = "; held: can't tell since "

// HeldExhaustedMark follows "(minFree F)" in the part of a network that
// can't tell and was exhausted when it last could: the taint stays for it.
const HeldExhaustedMark = ", exhausted when last counted"

// heldPart is the part of a network that can't tell since since, why:
// head is "NETWORK[ (SOURCE)]" and the counts it still has, if any;
// exhausted is its last verdict, which stands.
func heldPart(head string, since time.Time, why string, minFree int, exhausted bool) string {
	s := head + heldAt + since.UTC().Format(time.RFC3339) + ": " + why + " (minFree " + strconv.Itoa(minFree) + ")"
	if exhausted {
		s += HeldExhaustedMark
	}
	return s
}

// Part is what the pool watch says of one network's pool: FormatLine
// writes it, and ParseLine reads it back as a Line.
type Part struct {
	Network string
	// Source is status.ipam's type; host-local's is left out of a count
	// that can tell.
	Source string
	// Count is what was counted; for a pool that can't tell, the counts
	// it still has, if any.
	Count   Count
	MinFree int
	// Exhausted is the verdict (hysteresis included); for a pool that
	// can't tell, the last verdict, which stands.
	Exhausted bool
	// HeldSince is when the pool began to can't tell, Why why; zero for
	// a pool that can tell.
	HeldSince time.Time
	Why       string
	// Note follows the part in parentheses.
	Note string
}

// FormatLine is the pool line of parts, in their order.
func FormatLine(parts []Part) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.format()
	}
	return strings.Join(out, "; ")
}

// format is one network's part of the line.
func (p Part) format() string {
	var s string
	switch {
	case !p.HeldSince.IsZero():
		s = p.Network
		if p.Source != config.IPAMHostLocal {
			s += " (" + p.Source + ")"
		}
		if len(p.Count.Ranges) > 0 {
			// What it did count, without the verdict it cannot give.
			c := p.Count
			c.Unknown, c.Grows = "", false
			s = c.Describe(p.Network, p.Source)
		}
		s = heldPart(s, p.HeldSince, p.Why, p.MinFree, p.Exhausted)
	default:
		if p.Source == config.IPAMHostLocal {
			s = Describe(p.Network, p.Count.Ranges)
		} else {
			s = p.Count.Describe(p.Network, p.Source)
		}
		s += " (minFree " + strconv.Itoa(p.MinFree) + ")"
		if p.Exhausted {
			s += ExhaustedMark
		}
	}
	if p.Note != "" {
		s += " (" + p.Note + ")"
	}
	return s
}

// Describe is "network: n of m addresses in use" for each range set.
func Describe(network string, rs []Range) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.InUse()
		if len(rs) > 1 {
			parts[i] += " in " + r.Set
		}
	}
	return network + ": " + strings.Join(parts, ", ")
}

// Describe is a count as the node condition and kubectl netready say it:
// "network (source): n of m addresses in use" for each range set, and
// whether the source can grow its pool or cannot tell.
func (c Count) Describe(network, source string) string {
	parts := make([]string, 0, len(c.Ranges))
	for _, r := range c.Ranges {
		p := r.InUse()
		if len(c.Ranges) > 1 || r.Set != "IPv4" && r.Set != "IPv6" {
			p += " in " + r.Set
		}
		if r.Grows && !c.Grows {
			p += " (can add addresses)"
		}
		parts = append(parts, p)
	}
	s := network + " (" + source + ")"
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	switch {
	case c.Unknown != "":
		s += "; cannot tell: " + c.Unknown
	case c.Grows:
		s += "; the source can add addresses"
	}
	return s
}

// MaxLine is the bound of the condition's message that carries the pool
// line (nodewriter.Condition cuts it there, ending with "..."): a line of
// that length that ends so was cut short.
const MaxLine = 1024

// States of a Line.
const (
	StateExhausted = "exhausted"
	StateRoom      = "room"    // fewer than minFree are not missing
	StateGrows     = "grows"   // the source adds addresses by itself
	StateUnknown   = "unknown" // can't tell: Why says why
)

// Line is one network's pool as the condition's message says it.
type Line struct {
	Network string `json:"network"`
	// Source is status.ipam's type: "host-local", "cilium", ...
	Source  string      `json:"source"`
	Ranges  []LineRange `json:"ranges,omitempty"`
	MinFree int         `json:"minFree,omitempty"`
	State   string      `json:"state"`
	// Why is, for a pool that can't tell, the source's reason.
	Why string `json:"why,omitempty"`
	// Since is, for a pool that can't tell, when that began: its last
	// verdict, and so the taint, is held since then. Zero in an older
	// sidecar's message.
	Since time.Time `json:"since,omitzero"`
	// HeldExhausted: the pool can't tell and was exhausted when it last
	// could, so the taint stays for it.
	HeldExhausted bool `json:"heldExhausted,omitempty"`
}

// LineRange is one range set's count (a pod takes one address from each).
type LineRange struct {
	// Set names the range set when the message does ("10.1.0.0/28",
	// "IPv6"); it does for a pool of several, and for an agent's CIDR.
	Set      string   `json:"set,omitempty"`
	Free     *big.Int `json:"free"`
	Capacity *big.Int `json:"capacity"`
	Used     int64    `json:"used"`
	Cooling  int64    `json:"cooling,omitempty"`
}

// partStart finds where each network's part begins: the name, the source,
// and the start of what a part can say first. A reason that quotes another
// part's start could split a part; none of the sources' reasons does.
var partStart = regexp.MustCompile(`(?:^|; )([A-Za-z0-9][A-Za-z0-9_.-]*)(?: \(([A-Za-z0-9][A-Za-z0-9_.-]*)\))?` +
	`(?:: \d+ of \d+ addresses in use|: cannot count: |; cannot tell: |; held: can't tell since | \(minFree \d+\))`)

var (
	rangeCount = regexp.MustCompile(`(\d+) of (\d+) addresses in use(?:, (\d+) cooling down)?(?: in ([^\s,;()]+(?:,[^\s,;()]+)*))?`)
	minFreeAt  = regexp.MustCompile(` \(minFree (\d+)\)`)
)

// ParseLine reads back the pools of a message the pool watch wrote, in
// its order. Text it does not know is skipped; a part cut short (the
// message is bounded) can't tell.
func ParseLine(msg string) []Line {
	locs := partStart.FindAllStringSubmatchIndex(msg, -1)
	out := make([]Line, 0, len(locs))
	for i, loc := range locs {
		end := len(msg)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		p := Line{Network: msg[loc[2]:loc[3]], Source: "host-local"}
		bodyAt := loc[3]
		if loc[4] >= 0 {
			p.Source, bodyAt = msg[loc[4]:loc[5]], loc[5]+1
		}
		parsePart(&p, msg[bodyAt:end])
		if i == len(locs)-1 && cut(msg) && p.State != StateExhausted {
			// What followed, its mark among it, is lost.
			p.State, p.Why = StateUnknown, cutShort
		}
		out = append(out, p)
	}
	return out
}

// cutShort is why a pool whose part the message's bound cut can't tell.
const cutShort = "the condition's message is cut short before this pool's verdict"

// cut reports whether Condition cut the message at its bound, which it
// moves back to the start of a character.
func cut(msg string) bool {
	return len(msg) > MaxLine-utf8.UTFMax && len(msg) <= MaxLine && strings.HasSuffix(msg, "...")
}

// parsePart reads what follows the network and source.
func parsePart(p *Line, body string) {
	if counts, held, ok := strings.Cut(body, heldAt); ok {
		parseHeld(p, counts, held)
		return
	}
	if why, ok := strings.CutPrefix(body, ": cannot count: "); ok {
		p.State, p.Why = StateUnknown, why
		return
	}
	m := minFreeAt.FindAllStringSubmatchIndex(body, -1)
	if len(m) == 0 {
		p.State, p.Why = StateUnknown, cutShort
		p.Ranges = ranges(body)
		return
	}
	last := m[len(m)-1]
	p.MinFree, _ = strconv.Atoi(body[last[2]:last[3]])
	counts, tail := body[:last[0]], body[last[1]:]
	if before, why, ok := strings.Cut(counts, "; cannot tell: "); ok {
		p.Ranges, p.State, p.Why = ranges(before), StateUnknown, why
		return
	}
	p.Ranges = ranges(counts)
	switch {
	case strings.HasPrefix(tail, ExhaustedMark):
		p.State = StateExhausted
	case strings.Contains(counts, "; the source can add addresses"):
		p.State = StateGrows
	default:
		p.State = StateRoom
	}
}

// parseHeld reads the part of a pool that can't tell: counts is what
// precedes "; held: can't tell since ", held what follows it.
func parseHeld(p *Line, counts, held string) {
	p.State, p.Ranges = StateUnknown, ranges(counts)
	at, rest, _ := strings.Cut(held, ": ")
	p.Since, _ = time.Parse(time.RFC3339, at)
	m := minFreeAt.FindAllStringSubmatchIndex(rest, -1)
	if len(m) == 0 {
		p.Why = rest // cut short: its minFree and mark are lost
		return
	}
	last := m[len(m)-1]
	p.MinFree, _ = strconv.Atoi(rest[last[2]:last[3]])
	p.Why = rest[:last[0]]
	p.HeldExhausted = strings.HasPrefix(rest[last[1]:], HeldExhaustedMark)
}

func ranges(s string) []LineRange {
	var out []LineRange
	for _, m := range rangeCount.FindAllStringSubmatch(s, -1) {
		used, _ := strconv.ParseInt(m[1], 10, 64)
		capacity, _ := new(big.Int).SetString(m[2], 10)
		cooling, _ := strconv.ParseInt(m[3], 10, 64) // "" is 0
		free := new(big.Int).Sub(capacity, big.NewInt(used+cooling))
		out = append(out, LineRange{Set: m[4], Free: free, Capacity: capacity, Used: used, Cooling: cooling})
	}
	return out
}
