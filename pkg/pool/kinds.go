package pool

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/conflist"
)

// kind is one pool source in the table: its status.ipam type, what "auto"
// takes for it, how its count reaches the node, what to do when it runs
// out, and how to make it from the ipam object.
type kind struct {
	typ string
	// plugin is the chain's first plugin type that "auto" counts with
	// this source; ipam, the first plugin's ipam type that it does,
	// keeping the keys keep of that ipam object (those that say which
	// families and pools the plugin assigns from). Host-local is taken
	// from the first plugin's ipam object itself.
	plugin, ipam string
	keep         []string
	// origin is where a count of it comes from.
	origin Origin
	// advice is what an operator can do, besides freeing addresses,
	// about an exhausted pool of network on node.
	advice func(node, network string) string
	make   func(network string, ipam json.RawMessage) (Source, error)
}

// Origin is where a source's count comes from: the one answer to "is
// this an agent?".
type Origin int

const (
	// Folder is host-local's allocation folder, which the sidecar
	// watches with inotify.
	Folder Origin = iota
	// Agent is a node agent, polled; STATUS keeps its answer briefly.
	Agent
	// Sidecar is the API server, which only the sidecar reads; STATUS
	// reads the sidecar's verdict.
	Sidecar
)

// OriginOf is where src's count comes from, by its kind.
func OriginOf(src Source) Origin {
	k, _ := kindOf(src.Type())
	return k.origin
}

// kinds are the sources, one file each (hostlocal.go, cilium.go, aws.go,
// calico.go, ovn.go), in the order messages list them: adding one is its
// file and a line here.
var kinds = []kind{hostLocalKind, ciliumKind, awsKind, calicoKind, ovnKind}

// kindOf is the kind of a status.ipam type, or false.
func kindOf(typ string) (kind, bool) {
	for _, k := range kinds {
		if k.typ == typ {
			return k, true
		}
	}
	return kind{}, false
}

// New makes the source an ipam object names (Resolve's answer).
func New(network string, ipam json.RawMessage) (Source, error) {
	var obj struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(ipam, &obj); err != nil {
		return nil, fmt.Errorf("status ipam: %w", err)
	}
	k, ok := kindOf(obj.Type)
	if !ok {
		return nil, fmt.Errorf("status ipam: netready cannot count a pool of type %q", obj.Type)
	}
	return k.make(network, ipam)
}

// TypeOf is the "type" of an ipam object: the source it names.
func TypeOf(ipam json.RawMessage) string {
	var obj struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(ipam, &obj)
	return obj.Type
}

// Resolve returns the ipam object the status block names: its own, or for
// "auto" the one AutoIPAM picks from the network's config file in
// confDir, read with conflist.Find as the runtime would.
func Resolve(network string, sc *config.StatusConf) (json.RawMessage, error) {
	if !sc.IPAMAuto() {
		return sc.IPAM, nil
	}
	f, err := conflist.Find(sc.ConfDir, network)
	if err != nil {
		return nil, fmt.Errorf(`ipam "auto": %w`, err)
	}
	return AutoIPAM(f)
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
	for _, k := range kinds {
		if k.ipam != "" && k.ipam == ipamType {
			return kept(f.FirstIPAM(), k.typ, k.keep)
		}
	}
	var known, knownIPAM []string
	for _, k := range kinds {
		if k.ipam != "" {
			knownIPAM = append(knownIPAM, k.ipam)
		}
		if k.plugin == "" {
			continue
		}
		if k.plugin == first {
			return json.RawMessage(fmt.Sprintf(`{"type":%q}`, k.typ)), nil
		}
		known = append(known, k.plugin)
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

// Advice is what an operator can do about an exhausted pool of source
// typ for network on node: free addresses there, or give nodes more of
// them, in the source's own terms.
func Advice(typ, node, network string) string {
	free := "free addresses on " + node + " (delete pods there that can go)"
	if k, ok := kindOf(typ); ok {
		return free + k.advice(node, network)
	}
	return free + ", or give the node a larger pool in " + typ + "'s configuration"
}
