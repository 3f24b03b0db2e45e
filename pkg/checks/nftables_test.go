package checks

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/google/nftables"

	"github.com/netready/netready/pkg/nftrule"
)

// TestChainHoldsReadsRealRules: the probe of a rule check, on rules that
// the real nft and iptables-nft wrote into a chain among many other pods'
// rules, finds the pod's own rule (as an address or only in a comment),
// and never a neighbour's.
func TestChainHoldsReadsRealRules(t *testing.T) {
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
	in := func(cmd string, stdin string) {
		t.Helper()
		c := exec.Command("nsenter", "--net="+netns.Path(), cmd, "-f", "-")
		if cmd == "iptables-nft-restore" {
			c = exec.Command("nsenter", "--net="+netns.Path(), cmd, "--noflush")
		}
		c.Stdin = strings.NewReader(stdin)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", cmd, err, out)
		}
	}
	var others strings.Builder
	others.WriteString("add table inet t\nadd chain inet t pods\n")
	ipt := strings.Builder{}
	ipt.WriteString("*filter\n:PODS - [0:0]\n:NOTES - [0:0]\n")
	for i := range 200 {
		fmt.Fprintf(&others, "add rule inet t pods ip saddr 10.9.%d.%d accept\n", i/100, 10+i%100)
		fmt.Fprintf(&ipt, "-A PODS -s 10.9.%d.%d/32 -j ACCEPT\n", i/100, 10+i%100)
	}
	ipt.WriteString("-A PODS -s 10.9.0.50/32 -m comment --comment \"pod web-10\" -j ACCEPT\n")
	ipt.WriteString("-A NOTES -m comment --comment \"-s 10.9.0.5/32\" -j ACCEPT\nCOMMIT\n")
	in("nft", others.String())
	in("iptables-nft-restore", ipt.String())

	tests := []struct {
		name         string
		fam          nftables.TableFamily
		table, chain string
		match        nftrule.Match
		want         bool
		why          string
	}{
		{"nft: a neighbour's rules only", nftables.TableFamilyINet, "t", "pods", nftrule.NFTText("ip saddr 10.9.0.5 accept"), false, "no rule matches yet"},
		{"nft: the pod's rule among 200", nftables.TableFamilyINet, "t", "pods", nftrule.NFTText("ip saddr 10.9.1.60 accept"), true, ""},
		{"iptables: a neighbour, 10.9.0.50", nftables.TableFamilyIPv4, "filter", "PODS", nftrule.IPTables("-s 10.9.0.5/32"), false, "no rule matches yet"},
		{"iptables: the pod's rule among 200", nftables.TableFamilyIPv4, "filter", "PODS", nftrule.IPTables("-s 10.9.1.99/32"), true, ""},
		{"iptables: the form only in a comment", nftables.TableFamilyIPv4, "filter", "NOTES", nftrule.IPTables("-s 10.9.0.5/32"), true, ""},
		{"a chain that does not exist", nftables.TableFamilyIPv4, "filter", "NONE", nftrule.IPTables("-s 10.9.0.5/32"), false, "chain filter/NONE does not exist (yet)"},
		{"a table that does not exist", nftables.TableFamilyINet, "none", "pods", nftrule.NFTText("ip saddr 10.9.0.5 accept"), false, "chain none/pods does not exist (yet)"},
	}
	err = netns.Do(func(ns.NetNS) error {
		env := NewEnv("")
		defer env.Close()
		for _, tt := range tests {
			got, why := env.chainHolds(tt.fam, tt.table, tt.chain, tt.match)
			if got != tt.want || why != tt.why {
				t.Errorf("%s: chainHolds = %v, %q; want %v, %q", tt.name, got, why, tt.want, tt.why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
