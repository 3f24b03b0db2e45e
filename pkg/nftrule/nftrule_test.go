package nftrule

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
)

func TestRender(t *testing.T) {
	ip4 := func(s string) []byte { return net.ParseIP(s).To4() }
	v4 := &nftables.Table{Family: nftables.TableFamilyIPv4}
	v6 := &nftables.Table{Family: nftables.TableFamilyIPv6}
	load := func(off, n uint32) *expr.Payload {
		return &expr.Payload{Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n, DestRegister: 1}
	}
	eq := func(b []byte) *expr.Cmp { return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b} }
	tests := []struct {
		name  string
		table *nftables.Table
		exprs []expr.Any
		data  []byte
		want  string
	}{
		{"every kind of part", nil, []expr.Any{
			load(12, 4), eq(ip4("10.1.0.5")),
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			eq([]byte("veth1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")),
			&expr.Payload{Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2, DestRegister: 1}, eq([]byte{0x1f, 0x90}),
			&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictJump, Chain: "pod-web"},
		}, userdata.AppendString(nil, userdata.TypeComment, "pod default/web-0"),
			`ip saddr 10.1.0.5 iifname "veth1" th dport 8080 counter jump pod-web comment "pod default/web-0"`},
		{"a byte-aligned prefix loads fewer bytes", v4, []expr.Any{load(16, 2), eq([]byte{10, 2}), &expr.Verdict{Kind: expr.VerdictDrop}}, nil,
			"ip daddr 10.2.0.0/16 drop"},
		{"another prefix is masked", v4, []expr.Any{load(12, 4),
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 255, 254, 0}, Xor: []byte{0, 0, 0, 0}},
			eq(ip4("10.3.0.0")), &expr.Verdict{Kind: expr.VerdictReturn}}, nil,
			"ip saddr 10.3.0.0/23 return"},
		{"a mask with a hole is no prefix", v4, []expr.Any{load(12, 4),
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 255, 0}, Xor: []byte{0, 0, 0, 0}},
			eq(ip4("10.0.3.0"))}, nil,
			"10.0.3.0"},
		{"negated", v4, []expr.Any{load(12, 4), &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ip4("10.4.0.5")}}, nil,
			"ip saddr != 10.4.0.5"},
		{"IPv6 prefix", v6, []expr.Any{load(8, 8), eq([]byte{0xfd, 0, 0, 0, 0, 0, 0, 1})}, nil,
			"ip6 saddr fd00:0:0:1::/64"},
		{"an IPv4 TTL is no IPv6 address", v4, []expr.Any{load(8, 1), eq([]byte{64})}, nil,
			"0x40"},
		{"an expression it does not know ends the operand", v4, []expr.Any{load(12, 4), nil, eq(ip4("10.1.0.5"))}, nil,
			"10.1.0.5"},
	}
	for _, tt := range tests {
		r := &nftables.Rule{Table: tt.table, Exprs: tt.exprs, UserData: tt.data}
		if diff := cmp.Diff(tt.want, Render(r)); diff != "" {
			t.Errorf("%s: Render (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestIPTablesForms(t *testing.T) {
	tests := []struct {
		match     string
		decidable bool
	}{
		{"-s 10.1.0.5/32", true},
		{"-s 10.1.0.5", true},
		{"-d 10.2.0.0/16", true},
		{"! -s 10.4.0.5/32", true},
		{"-s fd00::5/128", true},
		{"-s 10.1.0.5/33", false},
		{"-s 10.1.0.5/032", false},
		{"-s 10.1.0.5/32 -j ACCEPT", false},
		{"--source 10.1.0.5/32", false},
		{"-s  10.1.0.5/32", false},
		{"-s web-0", false},
		{"-s ::ffff:10.1.0.5/128", false},
		{"-s ::10.1.0.5/128", false},
		{"-m comment --comment \"pod web-0\"", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IPTables(tt.match).Decidable(); got != tt.decidable {
			t.Errorf("IPTables(%q).Decidable() = %v, want %v", tt.match, got, tt.decidable)
		}
	}
}

// TestIPTablesParity: for every decidable form, on rules that the real
// iptables-nft and ip6tables-nft wrote, a match read from the rule's
// expressions says what a token match on `iptables -S` says. The rules
// are read back through netlink, as the plugin reads them.
func TestIPTablesParity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root for a network namespace: run `make test` as root")
	}
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		netns.Close()
		testutils.UnmountNS(netns)
	}()
	families := []struct {
		cmd    string
		fam    nftables.TableFamily
		rules  []string
		probes []string
	}{
		{"iptables-nft", nftables.TableFamilyIPv4, []string{
			"-s 10.1.0.5/32 -j ACCEPT", "-d 10.1.0.5/32 -j ACCEPT", "-s 10.2.0.0/16 -j DROP", "-d 10.3.0.0/23 -j RETURN",
			"! -s 10.4.0.5/32 -j ACCEPT", "-s 10.5.0.5/32 -p tcp --dport 80 -m comment --comment \"-s 10.6.0.5/32\" -j ACCEPT",
			"-m comment --comment \"x! -s 10.6.0.7/32\" -j ACCEPT",
			"-s 10.7.0.0/8 -j ACCEPT", "-s 10.8.0.1/31 -j ACCEPT", "-i eth0 -s 10.9.0.50/32 -j ACCEPT",
		}, []string{"10.1.0.5", "10.1.0.50", "10.2.0.0", "10.3.0.0", "10.4.0.5", "10.5.0.5", "10.0.0.0", "10.8.0.0", "10.9.0.5", "10.9.0.50", "10.6.0.5", "10.6.0.7"}},
		{"ip6tables-nft", nftables.TableFamilyIPv6, []string{
			"-s fd00::5/128 -j ACCEPT", "-d fd00:1::/64 -j ACCEPT", "! -s fd00::6/128 -j ACCEPT", "-s fd00:2::/63 -j DROP",
		}, []string{"fd00::5", "fd00:1::", "fd00::6", "fd00:2::", "fd00::50"}},
	}
	for _, f := range families {
		run := func(args ...string) string {
			cmd := exec.Command("nsenter", append([]string{"--net=" + netns.Path(), f.cmd}, args...)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s %s: %v: %s", f.cmd, strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		run("-N", "PAR")
		for _, r := range f.rules {
			run(append([]string{"-A", "PAR"}, splitArgs(r)...)...)
		}
		var printed []string
		for _, line := range strings.Split(run("-S", "PAR"), "\n") {
			if strings.HasPrefix(line, "-A ") {
				printed = append(printed, line)
			}
		}
		var rules []*nftables.Rule
		err := netns.Do(func(ns.NetNS) error {
			c, err := nftables.New()
			if err != nil {
				return err
			}
			rules, err = c.GetRules(&nftables.Table{Name: "filter", Family: f.fam}, &nftables.Chain{Name: "PAR"})
			return err
		})
		if err != nil || len(rules) != len(printed) {
			t.Fatalf("%s: %d rules read through netlink (%v), %d printed", f.cmd, len(rules), err, len(printed))
		}
		decided := 0
		for _, probe := range f.probes {
			var forms []string
			for _, flag := range []string{"-s", "-d", "! -s"} {
				forms = append(forms, flag+" "+probe)
				for _, n := range []int{8, 16, 23, 31, 32, 63, 64, 128} {
					forms = append(forms, fmt.Sprintf("%s %s/%d", flag, probe, n))
				}
			}
			for _, form := range forms {
				m := IPTables(form)
				if !m.Decidable() {
					continue
				}
				for i, r := range rules {
					want := ContainsToken(printed[i], form)
					if got := m.In(r); got != want {
						t.Errorf("%s: %q in %q: from the expressions %v, from iptables -S %v", f.cmd, form, printed[i], got, want)
					}
					if want {
						decided++
					}
				}
			}
		}
		if decided == 0 {
			t.Errorf("%s: no form matched any rule: the parity proves nothing", f.cmd)
		}
	}
}

// splitArgs splits a rule into arguments, keeping a double-quoted one
// whole.
func splitArgs(s string) []string {
	var out []string
	for s != "" {
		s = strings.TrimLeft(s, " ")
		if strings.HasPrefix(s, `"`) {
			end := strings.Index(s[1:], `"`) + 1
			out = append(out, s[1:end])
			s = s[end+1:]
			continue
		}
		arg, rest, _ := strings.Cut(s, " ")
		out = append(out, arg)
		s = rest
	}
	return out
}

// TestExcludes: a rule message is skipped only when the match names an
// address and the message holds neither its bytes nor its text.
func TestExcludes(t *testing.T) {
	v4 := []byte{10, 9, 0, 5}
	tests := []struct {
		name  string
		match Match
		msg   []byte
		want  bool
	}{
		{"iptables: another pod's address", IPTables("-s 10.9.0.5/32"), []byte{1, 2, 10, 9, 0, 6}, true},
		{"iptables: the address's bytes", IPTables("-s 10.9.0.5/32"), append([]byte{1, 2}, v4...), false},
		{"iptables: the address in a comment", IPTables("-s 10.9.0.5/32"), []byte("x -s 10.9.0.5/32 x"), false},
		{"iptables: IPv6", IPTables("-d fd00::5/128"), netip.MustParseAddr("fd00::5").AsSlice(), false},
		{"iptables: IPv6, another address", IPTables("-d fd00::5/128"), netip.MustParseAddr("fd00::6").AsSlice(), true},
		{"iptables: a match only iptables judges", IPTables("-m comment --comment web-0"), []byte{1}, false},
		{"nft: an address and its prefix", NFTText("ip saddr 10.9.0.0/24 accept"), []byte{10, 9, 0, 0}, false},
		{"nft: another network", NFTText("ip saddr 10.9.0.0/24 accept"), []byte{10, 9, 1, 0}, true},
		{"nft: no address", NFTText("meta mark 0x1 accept"), []byte{1}, false},
	}
	for _, tt := range tests {
		if got := tt.match.Excludes(tt.msg); got != tt.want {
			t.Errorf("%s: Excludes = %v, want %v", tt.name, got, tt.want)
		}
	}
}
