package calico

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The informers keep these compact forms, made by the transforms below,
// instead of Calico's objects: a /26 block's allocations, attributes and
// sequence numbers are kilobytes, and every sidecar watches every block.
// Each keeps only a name in its ObjectMeta, which the informer's store keys
// by.

// windowsReservedHandle is the handle calico-ipam gives the addresses it
// reserves in a block for Windows nodes (x.0, x.1, x.2 and the last):
// allocated, but never a pod's (ipam_block.go, WindowsReservedHandle).
const windowsReservedHandle = "windows-reserved-ipam-handle"

// block is an ipamblocks.crd.projectcalico.org object, counted.
type block struct {
	metav1.ObjectMeta
	CIDR netip.Prefix
	// Affinity is the block's spec.affinity ("host:<node>"), or empty.
	Affinity string
	// Free is the length of spec.unallocated: the ordinals calico-ipam
	// hands out (autoAssign reads no other list).
	Free int
	// Used are allocations of a workload; Reserved the Windows-reserved
	// ones, which no pod ever gets.
	Used, Reserved int
	// Released are when each released-but-not-yet-deallocated address was
	// released (the attribute's releasedAt, Calico's IP cooldown): still
	// in allocations until the cooldown passes.
	Released []time.Time
	// Invalid says why the block cannot be read (no CIDR).
	Invalid string
}

// affinity is a blockaffinities object: a node's claim on a block CIDR.
type affinity struct {
	metav1.ObjectMeta
	Node    string
	CIDR    netip.Prefix
	State   string
	Deleted bool
	// Host is false for other affinity types (a LoadBalancer's "virtual").
	Host bool
}

// ipPool is an ippools object's spec, as auto-assign reads it.
type ipPool struct {
	metav1.ObjectMeta
	CIDR              netip.Prefix
	BlockSize         int
	Disabled          bool
	NodeSelector      string
	NamespaceSelector string
	AllowedUses       []string
	AssignmentMode    string
	Invalid           string
}

// ipamConfig is the ipamconfigs object named "default", the only one
// calico-ipam reads.
type ipamConfig struct {
	metav1.ObjectMeta
	StrictAffinity     bool
	AutoAllocateBlocks bool
	MaxBlocksPerHost   int
	// Cooldown is spec.ipCooldownSeconds; zero when unset.
	Cooldown time.Duration
}

func meta(u *unstructured.Unstructured) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: u.GetName(), ResourceVersion: u.GetResourceVersion()}
}

func toBlock(u *unstructured.Unstructured) *block {
	b := &block{ObjectMeta: meta(u)}
	spec, _ := u.Object["spec"].(map[string]any)
	cidr, _ := spec["cidr"].(string)
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		b.Invalid = "spec.cidr " + strconv.Quote(cidr) + " is not a CIDR"
		return b
	}
	b.CIDR = p.Masked()
	b.Affinity, _ = spec["affinity"].(string)
	unalloc, _ := spec["unallocated"].([]any)
	b.Free = len(unalloc)
	attrs, _ := spec["attributes"].([]any)
	allocs, _ := spec["allocations"].([]any)
	for _, a := range allocs {
		idx, ok := asInt(a)
		if !ok {
			continue
		}
		var attr map[string]any
		if idx >= 0 && idx < len(attrs) {
			attr, _ = attrs[idx].(map[string]any)
		}
		if h, _ := attr["handle_id"].(string); strings.EqualFold(h, windowsReservedHandle) {
			b.Reserved++
			continue
		}
		if at, ok := releasedAt(attr); ok {
			b.Released = append(b.Released, at)
			continue
		}
		b.Used++
	}
	return b
}

// releasedAt reads an allocation attribute's release time (Calico's IP
// cooldown keeps a released address allocated until it passes).
func releasedAt(attr map[string]any) (time.Time, bool) {
	s, ok := attr["releasedAt"].(string)
	if !ok || s == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		// Released, at a time netready cannot read: still cooling.
		return time.Time{}, true
	}
	return t, true
}

func asInt(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case float64:
		return int(n), true
	case int:
		return n, true
	}
	return 0, false
}

func toAffinity(u *unstructured.Unstructured) *affinity {
	a := &affinity{ObjectMeta: meta(u)}
	spec, _ := u.Object["spec"].(map[string]any)
	a.Node, _ = spec["node"].(string)
	cidr, _ := spec["cidr"].(string)
	if p, err := netip.ParsePrefix(cidr); err == nil {
		a.CIDR = p.Masked()
	}
	a.State, _ = spec["state"].(string)
	del, _ := spec["deleted"].(string)
	a.Deleted, _ = strconv.ParseBool(del)
	typ, _ := spec["type"].(string)
	a.Host = typ == "" || typ == "host"
	return a
}

func toPool(u *unstructured.Unstructured) *ipPool {
	p := &ipPool{ObjectMeta: meta(u)}
	spec, _ := u.Object["spec"].(map[string]any)
	cidr, _ := spec["cidr"].(string)
	pre, err := netip.ParsePrefix(cidr)
	if err != nil {
		p.Invalid = "spec.cidr " + strconv.Quote(cidr) + " is not a CIDR"
		return p
	}
	p.CIDR = pre.Masked()
	if n, ok := asInt(spec["blockSize"]); ok {
		p.BlockSize = n
	} else if p.CIDR.Addr().Is4() {
		p.BlockSize = 26 // Calico's defaults
	} else {
		p.BlockSize = 122
	}
	if p.BlockSize < p.CIDR.Bits() || p.BlockSize > p.CIDR.Addr().BitLen() {
		p.Invalid = "spec.blockSize " + strconv.Itoa(p.BlockSize) + " does not fit " + p.CIDR.String()
	}
	p.Disabled, _ = spec["disabled"].(bool)
	p.NodeSelector, _ = spec["nodeSelector"].(string)
	p.NamespaceSelector, _ = spec["namespaceSelector"].(string)
	p.AssignmentMode, _ = spec["assignmentMode"].(string)
	uses, _ := spec["allowedUses"].([]any)
	for _, x := range uses {
		if s, ok := x.(string); ok {
			p.AllowedUses = append(p.AllowedUses, s)
		}
	}
	return p
}

func toConfig(u *unstructured.Unstructured) *ipamConfig {
	c := &ipamConfig{ObjectMeta: meta(u)}
	spec, _ := u.Object["spec"].(map[string]any)
	c.StrictAffinity, _ = spec["strictAffinity"].(bool)
	c.AutoAllocateBlocks, _ = spec["autoAllocateBlocks"].(bool)
	c.MaxBlocksPerHost, _ = asInt(spec["maxBlocksPerHost"])
	if s, ok := asInt(spec["ipCooldownSeconds"]); ok && s > 0 {
		c.Cooldown = time.Duration(s) * time.Second
	}
	return c
}

// transform turns what the reflector decoded into its compact form; a
// tombstone or anything else passes through unchanged.
func transform(conv func(*unstructured.Unstructured) any) func(any) (any, error) {
	return func(obj any) (any, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return conv(u), nil
		}
		return obj, nil
	}
}
