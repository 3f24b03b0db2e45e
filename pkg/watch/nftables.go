package watch

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/nftrule"
)

// NFTElement names one element of an nftables set: what an NFTSet source
// watches for. Key is the element's key bytes, e.g. an IPv4 address's four
// (a string, so that a Source stays comparable).
type NFTElement struct {
	Family     uint8 // nfproto, e.g. unix.NFPROTO_INET
	Table, Set string
	Key        string
}

// NFTRuleMatch names a chain and a match against its rules: what an
// NFTRule source watches for.
type NFTRuleMatch struct {
	Family       uint8 // nfproto, e.g. unix.NFPROTO_IPV4
	Table, Chain string
	Match        nftrule.Match
}

// Element attributes that golang.org/x/sys/unix does not name, from the
// kernel's uapi linux/netfilter/nf_tables.h.
const (
	nftaSetElemKeyEnd  = 0xa // NFTA_SET_ELEM_KEY_END: a range's closing key
	nftSetElemCatchall = 0x2 // NFT_SET_ELEM_CATCHALL
)

// openNFTables joins the nftables netlink group and reads its messages
// raw: google/nftables' monitor decodes every object and drops the table
// and set names of element events, which NFTSet needs.
//
// A wake comes at the end of a transaction (the kernel ends each with a
// new-generation message). For NFTSet, only a transaction that changed the
// set in a way that may have added the key wakes, and the wake Shows when
// the transaction committed the key itself: elements of other sets, and
// other keys of a plain set, wake no one. For NFTRule, only a transaction
// that added a rule to the chain that matches (the wake Shows it) or that
// the match cannot judge wakes: a rule that does not match, a rule of
// another chain and a deletion cannot make a match appear.
func openNFTables(ctx context.Context, src Source) (<-chan Wake, error) {
	var cfg netlink.Config
	if src.NetNS != "" {
		h, err := netns.GetFromPath(src.NetNS)
		if err != nil {
			return nil, fmt.Errorf("cannot open netns: %w", err)
		}
		defer h.Close()
		cfg.NetNS = int(h)
	}
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &cfg)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	if err := conn.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		conn.Close()
		return nil, fmt.Errorf("nftables monitor: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	out := make(chan Wake, 1)
	go func() {
		defer close(out)
		defer func() {
			if stop() {
				conn.Close()
			}
		}()
		var tx transaction
		for {
			// An error is the hub closing the socket or lost messages
			// (ENOBUFS): either way the stream ends, and the hub reopens
			// it and wakes its listeners to re-probe.
			msgs, err := conn.Receive()
			if err != nil {
				return
			}
			for _, m := range msgs {
				if w, ok := tx.take(m, src); ok {
					send(out, w)
				}
			}
		}
	}()
	return out, nil
}

// transaction gathers what one nftables transaction did to a watched
// element, up to the new-generation message that ends it.
type transaction struct {
	touched bool // the set changed in a way that may have added the key
	holds   bool // the last change to the key itself added it
}

// take notes one message and, at the end of a transaction, says whether
// and how to wake.
func (tx *transaction) take(m netlink.Message, src Source) (Wake, bool) {
	if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES {
		return Wake{}, false
	}
	switch m.Header.Type & 0xff {
	case unix.NFT_MSG_NEWGEN:
		w, ok := Wake{Shows: tx.holds}, tx.touched
		*tx = transaction{}
		return w, ok
	case unix.NFT_MSG_NEWSETELEM, unix.NFT_MSG_DELSETELEM:
		if src.Kind == NFTSet {
			tx.elements(m, src.Element)
		}
	case unix.NFT_MSG_NEWRULE, unix.NFT_MSG_DELRULE:
		if src.Kind == NFTRule {
			tx.rule(m, src.Rule)
		}
	case unix.NFT_MSG_NEWCHAIN:
		// A chain renamed to the watched name (iptables -E) brings its
		// rules without a rule message: probe.
		if src.Kind == NFTRule && names(m, unix.NFTA_CHAIN_TABLE, unix.NFTA_CHAIN_NAME, src.Rule) {
			tx.touched = true
		}
	case unix.NFT_MSG_DELCHAIN, unix.NFT_MSG_DELSET, unix.NFT_MSG_DELTABLE:
		if tx.deletes(m, src) {
			// What an earlier message added went with it, and the wake
			// this sends replaces one that showed it (send): probe.
			tx.touched, tx.holds = true, false
		}
	}
	return Wake{}, false
}

// deletes reports whether m deletes the watched table, or the watched set
// (NFTSet) or chain (NFTRule).
func (tx *transaction) deletes(m netlink.Message, src Source) bool {
	var fam uint8
	var table, obj string
	switch src.Kind {
	case NFTSet:
		fam, table, obj = src.Element.Family, src.Element.Table, src.Element.Set
	case NFTRule:
		fam, table, obj = src.Rule.Family, src.Rule.Table, src.Rule.Chain
	default:
		return false
	}
	switch m.Header.Type & 0xff {
	case unix.NFT_MSG_DELTABLE:
		return names(m, unix.NFTA_TABLE_NAME, 0, NFTRuleMatch{Family: fam, Table: table})
	case unix.NFT_MSG_DELSET:
		return src.Kind == NFTSet && names(m, unix.NFTA_SET_TABLE, unix.NFTA_SET_NAME, NFTRuleMatch{Family: fam, Table: table, Chain: obj})
	case unix.NFT_MSG_DELCHAIN:
		return src.Kind == NFTRule && names(m, unix.NFTA_CHAIN_TABLE, unix.NFTA_CHAIN_NAME, NFTRuleMatch{Family: fam, Table: table, Chain: obj})
	}
	return false
}

// names reports whether a message of want's family names want's table and
// chain in the attributes tableAttr and chainAttr (chainAttr 0: the table
// alone); a message that cannot be read may, so it does.
func names(m netlink.Message, tableAttr, chainAttr uint16, want NFTRuleMatch) bool {
	if len(m.Data) < 4 {
		return true
	}
	if m.Data[0] != want.Family {
		return false
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return true
	}
	var table, chain string
	for ad.Next() {
		switch ad.Type() {
		case tableAttr:
			table = ad.String()
		case chainAttr:
			if chainAttr != 0 {
				chain = ad.String()
			}
		}
	}
	return ad.Err() != nil || (table == want.Table && (chainAttr == 0 || chain == want.Chain))
}

// rule notes a message that added or removed a rule. A matching rule added
// holds; a rule of the chain removed after it may have been that rule, so
// the wake no longer Shows, and the listener probes.
func (tx *transaction) rule(m netlink.Message, want NFTRuleMatch) {
	switch {
	case !names(m, unix.NFTA_RULE_TABLE, unix.NFTA_RULE_CHAIN, want):
		return
	case m.Header.Type&0xff == unix.NFT_MSG_DELRULE:
		tx.holds = false
		return
	case !want.Match.Decidable() || len(m.Data) < 4:
		tx.touched = true
		return
	case want.Match.Excludes(m.Data[4:]):
		// Another pod's rule: most of what a storm brings.
		return
	}
	r, err := nftrule.Decode(want.Family, m.Data[4:])
	if err != nil {
		tx.touched = true
		return
	}
	if want.Match.In(r) {
		tx.touched, tx.holds = true, true
	}
}

// elements notes a message that added or removed elements of a set. Only
// an element creation can make a set hold a key; a message that cannot be
// read counts as a change that may have.
func (tx *transaction) elements(m netlink.Message, want NFTElement) {
	added := m.Header.Type&0xff == unix.NFT_MSG_NEWSETELEM
	if len(m.Data) < 4 {
		tx.touched = true
		return
	}
	if m.Data[0] != want.Family {
		return
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		tx.touched = true
		return
	}
	var table, set string
	var list []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_SET_ELEM_LIST_TABLE:
			table = ad.String()
		case unix.NFTA_SET_ELEM_LIST_SET:
			set = ad.String()
		case unix.NFTA_SET_ELEM_LIST_ELEMENTS:
			list = ad.Bytes()
		}
	}
	switch {
	case ad.Err() != nil:
		tx.touched = true
		return
	case table != want.Table || set != want.Set:
		return
	}
	ad, err = netlink.NewAttributeDecoder(list)
	if err != nil {
		tx.touched = true
		return
	}
	for ad.Next() {
		key, plain := element(ad.Bytes())
		switch {
		case !plain || len(key) != len(want.Key):
			// A range, a concatenation or a catch-all: it may cover
			// the key, so probe.
			tx.touched = true
		case string(key) == want.Key:
			tx.touched, tx.holds = true, added
		}
	}
	if ad.Err() != nil {
		tx.touched = true
	}
}

// element returns the key of one element and whether it is a plain key:
// not the end of an interval, and without a key range of its own.
func element(b []byte) ([]byte, bool) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, false
	}
	ad.ByteOrder = binary.BigEndian
	var key []byte
	plain := true
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_SET_ELEM_KEY:
			key = dataValue(ad.Bytes())
		case nftaSetElemKeyEnd:
			plain = false
		case unix.NFTA_SET_ELEM_FLAGS:
			plain = plain && ad.Uint32()&(unix.NFT_SET_ELEM_INTERVAL_END|nftSetElemCatchall) == 0
		}
	}
	return key, plain && key != nil && ad.Err() == nil
}

// dataValue unwraps NFTA_DATA_VALUE from a nested data attribute.
func dataValue(b []byte) []byte {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil
	}
	var v []byte
	for ad.Next() {
		if ad.Type() == unix.NFTA_DATA_VALUE {
			v = ad.Bytes()
		}
	}
	if ad.Err() != nil {
		return nil
	}
	return v
}
