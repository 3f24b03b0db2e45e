// Package calicotest writes Calico IPAM's custom resources the way
// calico-ipam does (libcalico-go/lib/ipam: claimAffineBlock,
// autoAssign's block writes, release), for tests on a real API server
// without Calico: test/fixtures/calico/crds.yaml declares the kinds.
package calicotest

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/netready/netready/pkg/pool/calico"
)

// Writer writes through a dynamic client.
type Writer struct {
	Dynamic dynamic.Interface
}

func object(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calico.Group + "/v1", "kind": kind,
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
}

// CIDRName is the object name Calico gives a CIDR (names.CIDRToName).
func CIDRName(p netip.Prefix) string {
	return strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(p.String())
}

// Config writes the IPAMConfig "default".
type Config struct {
	StrictAffinity, AutoAllocateBlocks bool
	MaxBlocksPerHost                   int
	CooldownSeconds                    int
}

// SetConfig creates or replaces the IPAMConfig "default".
func (w *Writer) SetConfig(ctx context.Context, c Config) error {
	spec := map[string]any{"strictAffinity": c.StrictAffinity, "autoAllocateBlocks": c.AutoAllocateBlocks,
		"maxBlocksPerHost": int64(c.MaxBlocksPerHost)}
	if c.CooldownSeconds > 0 {
		spec["ipCooldownSeconds"] = int64(c.CooldownSeconds)
	}
	return w.apply(ctx, calico.IPAMConfigs, object("IPAMConfig", "default", spec))
}

// Pool is an IPPool's spec.
type Pool struct {
	Name, CIDR   string
	BlockSize    int
	NodeSelector string
	Disabled     bool
}

// SetPool creates or replaces an IPPool, for workloads and tunnels as
// Calico defaults it.
func (w *Writer) SetPool(ctx context.Context, p Pool) error {
	sel := p.NodeSelector
	if sel == "" {
		sel = "all()"
	}
	return w.apply(ctx, calico.IPPools, object("IPPool", p.Name, map[string]any{
		"cidr": p.CIDR, "blockSize": int64(p.BlockSize), "nodeSelector": sel, "disabled": p.Disabled,
		"allowedUses": []any{"Workload", "Tunnel"}, "ipipMode": "Never", "vxlanMode": "Always", "natOutgoing": true,
	}))
}

func (w *Writer) apply(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) error {
	ri := w.Dynamic.Resource(gvr)
	cur, err := ri.Get(ctx, u.GetName(), metav1.GetOptions{})
	if err == nil {
		u.SetResourceVersion(cur.GetResourceVersion())
		_, err = ri.Update(ctx, u, metav1.UpdateOptions{})
	} else {
		_, err = ri.Create(ctx, u, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// Claim claims a block for node as claimAffineBlock does: a pending
// affinity, a new block with every ordinal unallocated and the node's
// affinity, then the affinity confirmed.
func (w *Writer) Claim(ctx context.Context, node, cidr string) error {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return err
	}
	aff := object("BlockAffinity", node+"-"+CIDRName(p), map[string]any{
		"node": node, "cidr": p.String(), "state": "pending", "deleted": "false", "type": "host",
	})
	affs := w.Dynamic.Resource(calico.BlockAffinities)
	created, err := affs.Create(ctx, aff, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("claim %s for %s: affinity: %w", cidr, node, err)
	}
	size := 1 << (p.Addr().BitLen() - p.Bits())
	allocs, unalloc := make([]any, size), make([]any, size)
	for i := range size {
		unalloc[i] = int64(i)
	}
	blk := object("IPAMBlock", CIDRName(p), map[string]any{
		"cidr": p.String(), "affinity": "host:" + node, "affinityClaimTime": time.Now().UTC().Format(time.RFC3339),
		"allocations": allocs, "unallocated": unalloc, "attributes": []any{},
		"strictAffinity": false, "sequenceNumber": time.Now().UnixNano(), "sequenceNumberForAllocation": map[string]any{},
	})
	if _, err := w.Dynamic.Resource(calico.IPAMBlocks).Create(ctx, blk, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("claim %s for %s: block: %w", cidr, node, err)
	}
	if err := unstructured.SetNestedField(created.Object, "confirmed", "spec", "state"); err != nil {
		return err
	}
	if _, err := affs.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("claim %s for %s: confirm: %w", cidr, node, err)
	}
	return nil
}

// Assign takes n addresses from the head of the block's unallocated list
// for pods of node, one attribute each, as autoAssign does; it returns how
// many it took (fewer when the block fills).
func (w *Writer) Assign(ctx context.Context, cidr, node string, n int) (int, error) {
	took := 0
	err := w.updateBlock(ctx, cidr, func(spec map[string]any) {
		took = 0
		unalloc, _ := spec["unallocated"].([]any)
		allocs, _ := spec["allocations"].([]any)
		attrs, _ := spec["attributes"].([]any)
		seq, _ := spec["sequenceNumber"].(int64)
		seqs, _ := spec["sequenceNumberForAllocation"].(map[string]any)
		if seqs == nil {
			seqs = map[string]any{}
		}
		for took < n && len(unalloc) > 0 {
			ord, _ := unalloc[0].(int64)
			unalloc = unalloc[1:]
			id := fmt.Sprintf("k8s-pod-network.%s-%d-%d", node, ord, seq)
			allocs[ord] = int64(len(attrs))
			attrs = append(attrs, map[string]any{"handle_id": id, "secondary": map[string]any{
				"namespace": "default", "node": node, "pod": "pod-" + strconv.FormatInt(ord, 10), "timestamp": time.Now().UTC().String(),
			}})
			seqs[strconv.FormatInt(ord, 10)] = seq
			took++
		}
		spec["unallocated"], spec["allocations"], spec["attributes"], spec["sequenceNumberForAllocation"] = unalloc, allocs, attrs, seqs
		spec["sequenceNumber"] = seq + 1
	})
	return took, err
}

// Release releases n allocated addresses of the block. With cooldown they
// stay allocated with the attribute's releasedAt set (Calico's IP
// cooldown); without, their ordinals go back to the end of unallocated.
func (w *Writer) Release(ctx context.Context, cidr string, n int, cooldown bool) error {
	return w.updateBlock(ctx, cidr, func(spec map[string]any) {
		unalloc, _ := spec["unallocated"].([]any)
		allocs, _ := spec["allocations"].([]any)
		attrs, _ := spec["attributes"].([]any)
		seqs, _ := spec["sequenceNumberForAllocation"].(map[string]any)
		done := 0
		for ord := range allocs {
			if done == n {
				break
			}
			idx, ok := allocs[ord].(int64)
			if !ok || int(idx) >= len(attrs) {
				continue
			}
			attr, _ := attrs[idx].(map[string]any)
			if _, released := attr["releasedAt"]; released {
				continue
			}
			if cooldown {
				attr["releasedAt"] = time.Now().UTC().Format(time.RFC3339)
			} else {
				// The attribute stays, unreferenced; calico-ipam compacts
				// attributes, which counting does not need.
				allocs[ord] = nil
				unalloc = append(unalloc, int64(ord))
				delete(seqs, strconv.Itoa(ord))
			}
			done++
		}
		spec["unallocated"], spec["allocations"], spec["attributes"] = unalloc, allocs, attrs
		if seqs != nil {
			spec["sequenceNumberForAllocation"] = seqs
		}
	})
}

// updateBlock reads, changes and writes a block, retrying on a conflict
// as calico-ipam's compare-and-swap does.
func (w *Writer) updateBlock(ctx context.Context, cidr string, change func(spec map[string]any)) error {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return err
	}
	ri := w.Dynamic.Resource(calico.IPAMBlocks)
	var last error
	for range 10 {
		u, err := ri.Get(ctx, CIDRName(p), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("block %s: %w", cidr, err)
		}
		spec, _ := u.Object["spec"].(map[string]any)
		change(spec)
		if _, last = ri.Update(ctx, u, metav1.UpdateOptions{}); last == nil {
			return nil
		}
	}
	return fmt.Errorf("block %s: %w", cidr, last)
}
