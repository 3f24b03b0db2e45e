package ovn

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/netready/netready/pkg/pool"
)

// The annotations ovnkube writes, and the network netready counts.
const (
	// NodeSubnets is the Node's subnets per network:
	// {"default":["10.244.1.0/24","fd00:10:244:1::/64"]}, or before dual
	// stack {"default":"10.244.1.0/24"}.
	NodeSubnets = "k8s.ovn.org/node-subnets"
	// PodNetworks is a pod's addresses per network, as ovnkube writes
	// them: {"default":{"ip_addresses":["10.244.1.5/24"],...}}. Anyone who
	// can patch the pod can write it too, so the count never reads it.
	PodNetworks = "k8s.ovn.org/pod-networks"
	// hybridOverlayIP and hybridOverlayMAC are set on a node whose switch
	// has a hybrid overlay port, which takes a third address (.3).
	hybridOverlayIP  = "k8s.ovn.org/hybrid-overlay-distributed-router-gateway-ip"
	hybridOverlayMAC = "k8s.ovn.org/hybrid-overlay-distributed-router-gateway-mac"
	// defaultNetwork is the cluster default network's key: every pod that
	// is not host-network has an address there.
	defaultNetwork = "default"
)

// ipv6Window is the most addresses ovnkube's allocator keeps of an IPv6
// subnet (allocator/ip: a bitmap of at most 65536, less the subnet's
// first address).
const ipv6Window = 65536

// subnet is one of the node's subnets and the addresses ovnkube never
// gives a pod.
type subnet struct {
	prefix   netip.Prefix
	reserved []netip.Addr
	// usable is what ovnkube can give pods.
	usable *big.Int
}

// parseNodeSubnets reads the Node's NodeSubnets for the default network,
// and the addresses ovnkube reserves in each: the subnet's first address
// and, in IPv4, its broadcast (allocator/ip); the gateway (.1) and the
// management port (.2) (logical switch manager); in IPv4, the hybrid
// overlay port (.3) when the node has one.
func parseNodeSubnets(annotations map[string]string) ([]subnet, error) {
	raw, ok := annotations[NodeSubnets]
	if !ok {
		return nil, fmt.Errorf("the Node has no %s annotation: has ovnkube given it a subnet yet?", NodeSubnets)
	}
	var byNet map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &byNet); err != nil {
		return nil, fmt.Errorf("the Node's %s annotation %q is not a JSON object: %v", NodeSubnets, raw, err)
	}
	entry, ok := byNet[defaultNetwork]
	if !ok {
		return nil, fmt.Errorf("the Node's %s annotation %q has no %q network", NodeSubnets, raw, defaultNetwork)
	}
	var cidrs []string
	if json.Unmarshal(entry, &cidrs) != nil {
		var one string
		if err := json.Unmarshal(entry, &one); err != nil {
			return nil, fmt.Errorf("the Node's %s annotation %q: %q is neither a CIDR nor a list of CIDRs", NodeSubnets, raw, defaultNetwork)
		}
		cidrs = []string{one}
	}
	if len(cidrs) == 0 {
		return nil, fmt.Errorf("the Node's %s annotation %q lists no subnet", NodeSubnets, raw)
	}
	_, hybrid := annotations[hybridOverlayIP]
	if _, ok := annotations[hybridOverlayMAC]; ok {
		hybrid = true
	}
	out := make([]subnet, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("the Node's %s annotation %q: %v", NodeSubnets, raw, err)
		}
		out = append(out, newSubnet(p.Masked(), hybrid))
	}
	return out, nil
}

func newSubnet(p netip.Prefix, hybrid bool) subnet {
	s := subnet{prefix: p}
	size := new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits()))
	first := p.Addr()
	if p.Addr().Is4() {
		s.reserved = append(s.reserved, first, last(p))
	} else {
		size = bigMin(size, big.NewInt(ipv6Window))
		s.reserved = append(s.reserved, first)
	}
	offsets := 2 // the gateway, the management port
	if hybrid && p.Addr().Is4() {
		offsets = 3
	}
	for a, i := first.Next(), 0; i < offsets && p.Contains(a); a, i = a.Next(), i+1 {
		if !slices.Contains(s.reserved, a) {
			s.reserved = append(s.reserved, a)
		}
	}
	s.usable = new(big.Int).Sub(size, big.NewInt(int64(len(s.reserved))))
	if s.usable.Sign() < 0 {
		s.usable.SetInt64(0)
	}
	return s
}

// last is a prefix's last address (IPv4's broadcast).
func last(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func bigMin(a, b *big.Int) *big.Int {
	if a.Cmp(b) < 0 {
		return a
	}
	return b
}

// podAddresses are the addresses kubelet posted for the pod
// (status.podIPs, from the sandbox's CNI result): written through
// pods/status, which the node's kubelet can write and a tenant cannot,
// unlike the pod's annotations, which anyone who can patch the pod can.
// At most the first address of each family counts, as kubelet reports one
// per family; a host-network pod's addresses are the node's, not the pool's.
func podAddresses(pod *corev1.Pod) ([]netip.Addr, error) {
	if pod.Spec.HostNetwork {
		return nil, nil
	}
	ips := pod.Status.PodIPs
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	var out []netip.Addr
	for _, ip := range ips {
		a, err := netip.ParseAddr(ip.IP)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: status.podIPs holds %q, not an IP address", pod.Namespace, pod.Name, ip.IP)
		}
		a = a.Unmap()
		if !slices.ContainsFunc(out, func(b netip.Addr) bool { return b.Is4() == a.Is4() }) {
			out = append(out, a)
		}
	}
	return out, nil
}

// holdsAddress: ovnkube releases the addresses of a pod that has
// terminated (Succeeded or Failed, util.PodCompleted) and may give them to
// another pod; a pod being deleted holds its addresses until it is gone.
func holdsAddress(pod *corev1.Pod) bool {
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// count is the node's pool: per subnet, the distinct addresses that its
// pods that hold addresses have there, against what ovnkube can give.
// ovnkube allocates a node's subnet once and never adds to it, so the
// pool never grows. A pod whose addresses cannot be read is skipped and
// named (in Said, and in skipped for the log): it leaves the count short
// by one pod, never the node blind.
func count(annotations map[string]string, pods []*corev1.Pod) (cnt pool.Count, skipped string) {
	subnets, err := parseNodeSubnets(annotations)
	if err != nil {
		return pool.Count{Unknown: err.Error()}, ""
	}
	used := make([]map[netip.Addr]bool, len(subnets))
	for i := range used {
		used[i] = map[netip.Addr]bool{}
	}
	holders := 0
	var unreadable []string
	for _, pod := range pods {
		if !holdsAddress(pod) {
			continue
		}
		addrs, err := podAddresses(pod)
		if err != nil {
			unreadable = append(unreadable, err.Error())
			continue
		}
		held := false
		for _, a := range addrs {
			for i, s := range subnets {
				if s.prefix.Contains(a) && !slices.Contains(s.reserved, a) {
					used[i][a], held = true, true
				}
			}
		}
		if held {
			holders++
		}
	}
	names := make([]string, len(subnets))
	for i, s := range subnets {
		cnt.Ranges = append(cnt.Ranges, pool.Range{Set: s.prefix.String(), Usable: s.usable, Used: int64(len(used[i]))})
		names[i] = s.prefix.String()
	}
	cnt.Said = fmt.Sprintf("ovn-kubernetes: %d pods hold addresses in the node's subnet %s (%s, less the addresses ovnkube reserves; the pods' status.podIPs)",
		holders, strings.Join(names, ", "), NodeSubnets)
	if skipped = skippedNote(unreadable); skipped != "" {
		cnt.Said += "; " + skipped
	}
	return cnt, skipped
}

// skippedNote counts the pods the count skipped and names the first, so
// that a message stays short however many there are.
func skippedNote(skipped []string) string {
	switch len(skipped) {
	case 0:
		return ""
	case 1:
		return "1 pod skipped, unreadable: " + skipped[0]
	default:
		return fmt.Sprintf("%d pods skipped, unreadable: %s, and %d more", len(skipped), skipped[0], len(skipped)-1)
	}
}
