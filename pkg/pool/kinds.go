// Package poolsource owns which pool source a network's chain names for
// status.ipam "auto": host-local's ipam object of the first plugin, or the
// source of the first plugin's type. It is kept apart from pkg/pool, which
// counts pools on Linux nodes, so that the installer's --validate builds
// for every platform.
package poolsource

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/netready/netready/pkg/conflist"
)

// byPlugin maps a chain's first plugin type to the status.ipam type that
// counts its pool, in the order messages list them.
var byPlugin = []struct{ plugin, typ string }{
	{"cilium-cni", "cilium"},
	{"aws-cni", "aws-vpc-cni"},
	{"ovn-k8s-cni-overlay", "ovn-kubernetes"},
}

// byIPAM maps the first plugin's ipam type to the status.ipam type that
// counts its pool (Calico's plugin allocates with calico-ipam), and the
// keys of that ipam object the source keeps: those that say which
// families and pools the plugin assigns from.
var byIPAM = []struct {
	ipam, typ string
	keep      []string
}{
	{"calico-ipam", "calico-ipam", []string{"assign_ipv4", "assign_ipv6", "ipv4_pools", "ipv6_pools"}},
}

// TypeOf is the "type" of an ipam object: the source it names.
func TypeOf(ipam json.RawMessage) string {
	var obj struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(ipam, &obj)
	return obj.Type
}

// AutoIPAM is "auto" resolved against one config file: the host-local
// ipam of its first plugin (conflist.File.HostLocalIPAM), or else the
// source of the first plugin's ipam type (calico-ipam) or of its type
// (cilium-cni: the Cilium agent, aws-cni: ipamd, ovn-k8s-cni-overlay:
// ovn-kubernetes), with the source's defaults.
func AutoIPAM(f *conflist.File) (json.RawMessage, error) {
	if f.PrimaryIPAM() != nil {
		return f.HostLocalIPAM()
	}
	first, ipamType := f.PrimaryTypes()
	source := func(typ string) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"type":%q}`, typ)) }
	var known, knownIPAM []string
	for _, b := range byIPAM {
		if b.ipam == ipamType {
			return kept(f.FirstIPAM(), b.typ, b.keep)
		}
		knownIPAM = append(knownIPAM, b.ipam)
	}
	for _, b := range byPlugin {
		if b.plugin == first {
			return source(b.typ), nil
		}
		known = append(known, b.plugin)
	}
	found := "has no ipam object"
	if ipamType != "" {
		found = fmt.Sprintf("has IPAM %q, not host-local or %s,", ipamType, strings.Join(knownIPAM, ", "))
	}
	return nil, fmt.Errorf(`ipam "auto": the first plugin of %s (type %q) %s and is none of %s: netready cannot count its pool, so leave "status.ipam" out (the pool is not watched), or set it to an ipam object that names the source`,
		f.Path, first, found, strings.Join(known, ", "))
}

// kept is the source typ's ipam object with the keys of ipam it keeps.
func kept(ipam json.RawMessage, typ string, keys []string) (json.RawMessage, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(ipam, &all); err != nil {
		return nil, fmt.Errorf(`ipam "auto": the first plugin's ipam: %w`, err)
	}
	out := map[string]json.RawMessage{}
	for _, k := range keys {
		if v, ok := all[k]; ok {
			out[k] = v
		}
	}
	t, _ := json.Marshal(typ)
	out["type"] = t
	return json.Marshal(out)
}
