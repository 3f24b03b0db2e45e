package nftrule

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Decode returns the rule that a rule notification's attributes carry, for
// Render and Match. Expressions that terms does not read are kept as nil,
// so that the walk knows the operand ended there.
func Decode(family byte, attrs []byte) (*nftables.Rule, error) {
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return nil, err
	}
	ad.ByteOrder = binary.BigEndian
	r := &nftables.Rule{Table: &nftables.Table{Family: nftables.TableFamily(family)}, Chain: &nftables.Chain{}}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_RULE_TABLE:
			r.Table.Name = ad.String()
		case unix.NFTA_RULE_CHAIN:
			r.Chain.Name = ad.String()
		case unix.NFTA_RULE_USERDATA:
			r.UserData = ad.Bytes()
		case unix.NFTA_RULE_EXPRESSIONS:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					e, err := decodeExpr(family, nad.Bytes())
					if err != nil {
						return err
					}
					r.Exprs = append(r.Exprs, e)
				}
				return nil
			})
		}
	}
	if err := ad.Err(); err != nil {
		return nil, fmt.Errorf("decode rule: %w", err)
	}
	return r, nil
}

// decodeExpr decodes one NFTA_LIST_ELEM of a rule's expressions, or
// returns nil for an expression that terms does not read.
func decodeExpr(family byte, b []byte) (expr.Any, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	var name string
	var data []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_EXPR_NAME:
			name = ad.String()
		case unix.NFTA_EXPR_DATA:
			data = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	var e expr.Any
	switch name {
	case "meta":
		e = &expr.Meta{}
	case "payload":
		e = &expr.Payload{}
	case "bitwise":
		e = &expr.Bitwise{}
	case "cmp":
		e = &expr.Cmp{}
	case "lookup":
		e = &expr.Lookup{}
	case "counter":
		e = &expr.Counter{}
	case "immediate":
		e = &expr.Immediate{}
	case "match":
		e = &expr.Match{}
	default:
		return nil, nil
	}
	if err := expr.Unmarshal(family, data, e); err != nil {
		return nil, fmt.Errorf("decode %s expression: %w", name, err)
	}
	// A verdict is an immediate that writes the verdict register.
	if imm, ok := e.(*expr.Immediate); ok {
		if imm.Register != unix.NFT_REG_VERDICT || len(imm.Data) != 0 {
			return nil, nil
		}
		v := &expr.Verdict{}
		if err := expr.Unmarshal(family, data, v); err != nil {
			return nil, fmt.Errorf("decode verdict: %w", err)
		}
		return v, nil
	}
	return e, nil
}
