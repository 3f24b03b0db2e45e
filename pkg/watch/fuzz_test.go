package watch

import (
	"testing"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/nftrule"
)

// FuzzTransaction: any message the kernel could send, however malformed,
// set element, rule or chain, is read without a panic; a transaction's end
// wakes exactly when something in it may have added what the listener
// waits for, Shows only what it holds, and resets the transaction.
func FuzzTransaction(f *testing.F) {
	elem, _ := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_SET_ELEM_KEY | unix.NLA_F_NESTED, Data: mustMarshal(netlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: []byte{10, 9, 0, 5}})},
	})
	list := mustMarshal(netlink.Attribute{Type: unix.NFTA_LIST_ELEM | unix.NLA_F_NESTED, Data: elem})
	msg, _ := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: []byte("t\x00")},
		{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte("pods\x00")},
		{Type: unix.NFTA_SET_ELEM_LIST_ELEMENTS | unix.NLA_F_NESTED, Data: list},
	})
	seed := append([]byte{unix.NFPROTO_INET, 0, 0, 0}, msg...)
	src := Source{Kind: NFTSet, Element: NFTElement{Family: unix.NFPROTO_INET, Table: "t", Set: "pods", Key: "\x0a\x09\x00\x05"}}
	var seen transaction
	seen.take(nftMessage(unix.NFT_MSG_NEWSETELEM, seed), src)
	if w, ok := seen.take(nftMessage(unix.NFT_MSG_NEWGEN, nil), src); !ok || !w.Shows {
		f.Fatal("the seed, the key's own element, does not show it")
	}
	f.Add(seed, true)
	f.Add([]byte{unix.NFPROTO_INET, 0, 0}, false)
	// A rule of the watched chain: source 10.9.0.5, as iptables-nft writes it.
	payload, _ := expr.Marshal(unix.NFPROTO_IPV4, &expr.Payload{Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4, DestRegister: 1})
	cmp, _ := expr.Marshal(unix.NFPROTO_IPV4, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{10, 9, 0, 5}})
	rule, _ := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: []byte("filter\x00")},
		{Type: unix.NFTA_RULE_CHAIN, Data: []byte("PODS\x00")},
		{Type: unix.NFTA_RULE_EXPRESSIONS | unix.NLA_F_NESTED, Data: append(
			mustMarshal(netlink.Attribute{Type: unix.NFTA_LIST_ELEM | unix.NLA_F_NESTED, Data: payload}),
			mustMarshal(netlink.Attribute{Type: unix.NFTA_LIST_ELEM | unix.NLA_F_NESTED, Data: cmp})...)},
	})
	ruleSeed := append([]byte{unix.NFPROTO_IPV4, 0, 0, 0}, rule...)
	ruleSrc := Source{Kind: NFTRule, Rule: NFTRuleMatch{Family: unix.NFPROTO_IPV4, Table: "filter", Chain: "PODS", Match: nftrule.IPTables("-s 10.9.0.5/32")}}
	seen = transaction{}
	seen.take(nftMessage(unix.NFT_MSG_NEWRULE, ruleSeed), ruleSrc)
	if w, ok := seen.take(nftMessage(unix.NFT_MSG_NEWGEN, nil), ruleSrc); !ok || !w.Shows {
		f.Fatal("the rule seed, the pod's own rule, does not show it")
	}
	f.Add(ruleSeed, true)
	f.Fuzz(func(t *testing.T, data []byte, added bool) {
		kind := uint16(unix.NFT_MSG_DELSETELEM)
		if added {
			kind = unix.NFT_MSG_NEWSETELEM
		}
		ruleKind := uint16(unix.NFT_MSG_DELRULE)
		if added {
			ruleKind = unix.NFT_MSG_NEWRULE
		}
		for _, s := range []struct {
			src  Source
			kind uint16
		}{{src, kind}, {ruleSrc, ruleKind}, {ruleSrc, unix.NFT_MSG_NEWCHAIN}} {
			var tx transaction
			tx.take(nftMessage(s.kind, data), s.src)
			touched, holds := tx.touched, tx.holds
			if holds && !touched {
				t.Errorf("%s: holds without a wake: %+v", s.src.Kind, tx)
			}
			w, ok := tx.take(nftMessage(unix.NFT_MSG_NEWGEN, nil), s.src)
			if ok != touched || (ok && w.Shows != holds) {
				t.Errorf("%s: the transaction's end woke %v (shows %v), want %v (shows %v)", s.src.Kind, ok, w.Shows, touched, holds)
			}
			if tx != (transaction{}) {
				t.Errorf("%s: transaction not reset after its end: %+v", s.src.Kind, tx)
			}
		}
	})
}

func nftMessage(kind uint16, data []byte) netlink.Message {
	return netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | kind)}, Data: data}
}

func mustMarshal(a netlink.Attribute) []byte {
	b, err := netlink.MarshalAttributes([]netlink.Attribute{a})
	if err != nil {
		panic(err)
	}
	return b
}
