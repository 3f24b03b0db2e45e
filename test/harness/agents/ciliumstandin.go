//go:build integration

package agents

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netready/netready/test/harness/cnitest"
)

// ciliumStages are the answers a Cilium agent gives for a fresh endpoint,
// in order, shaped as api/v1/openapi.yaml's Endpoint; nil is a 404.
var ciliumStages = []map[string]any{
	nil,
	{"id": 1742, "status": map[string]any{"state": "waiting-for-identity"}},
	{"id": 1742, "status": map[string]any{"state": "regenerating", "identity": map[string]any{"id": 5, "labels": []string{"reserved:init"}}}},
	{"id": 1742, "status": map[string]any{"state": "ready", "identity": map[string]any{"id": 5, "labels": []string{"reserved:init"}},
		"policy": map[string]any{"realized": map[string]any{"policy-revision": 7}, "spec": map[string]any{"policy-revision": 7}}}},
	{"id": 1742, "status": map[string]any{"state": "ready", "identity": map[string]any{"id": 48861, "labels": []string{"k8s:app=web"}},
		"policy": map[string]any{"realized": map[string]any{"policy-revision": 7}, "spec": map[string]any{"policy-revision": 8}}}},
	{"id": 1742, "status": map[string]any{"state": "ready", "identity": map[string]any{"id": CiliumFinalIdentity, "labels": []string{"k8s:app=web"}},
		"policy": map[string]any{"realized": map[string]any{"policy-revision": 8}, "spec": map[string]any{"policy-revision": 8}}}},
}

// CiliumAgent stands in for cilium-agent's REST API on a unix socket: each
// endpoint walks through ciliumStages, one stage per step after it is
// first asked for, or stays at stuck when that is >= 0.
type CiliumAgent struct {
	step  time.Duration
	stuck int

	mu        sync.Mutex
	firstSeen map[string]time.Time
	// node and nodeIP, once AsNode names them, answer /v1/cluster/nodes;
	// /v1/ip then maps every IP to the final identity, and ipQueries
	// counts those asks.
	node, nodeIP string
	ipQueries    int
}

// CiliumProgrammed is the stage, in ciliumStages, of an endpoint
// programmed with its final identity, CiliumFinalIdentity.
const (
	CiliumProgrammed    = 5
	CiliumFinalIdentity = 48861
)

// AsNode makes the agent answer as node's, with nodeIP as its address,
// what the propagation meter asks: /v1/cluster/nodes, and /v1/ip, whose
// ipcache has learned every IP at once with the final identity.
func (a *CiliumAgent) AsNode(node, nodeIP string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.node, a.nodeIP = node, nodeIP
}

// IPQueries is how many /v1/ip requests the agent has answered.
func (a *CiliumAgent) IPQueries() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ipQueries
}

// StartCiliumAgent serves the stand-in agent on sock: each endpoint moves
// one stage every step, and stays at stage stuck when that is >= 0.
func StartCiliumAgent(t testing.TB, sock string, step time.Duration, stuck int) *CiliumAgent {
	t.Helper()
	a := &CiliumAgent{step: step, stuck: stuck, firstSeen: map[string]time.Time{}}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(a.serve)}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return a
}

func (a *CiliumAgent) serve(w http.ResponseWriter, r *http.Request) {
	if a.serveNode(w, r) {
		return
	}
	id, ok := strings.CutPrefix(r.URL.Path, "/v1/endpoint/")
	if !ok || !strings.HasPrefix(id, "cni-attachment-id:") {
		http.Error(w, "invalid endpoint ID", http.StatusBadRequest)
		return
	}
	stage := a.stage(id)
	if ciliumStages[stage] == nil {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(ciliumStages[stage])
}

// serveNode answers the meter's requests once AsNode was called, shaped
// as api/v1/openapi.yaml's ClusterNodeStatus and IPListEntry; false when
// r is not one of them.
func (a *CiliumAgent) serveNode(w http.ResponseWriter, r *http.Request) bool {
	a.mu.Lock()
	node, nodeIP := a.node, a.nodeIP
	if node != "" && r.URL.Path == "/v1/ip" {
		a.ipQueries++
	}
	a.mu.Unlock()
	var answer any
	switch {
	case node == "":
		return false
	case r.URL.Path == "/v1/cluster/nodes":
		answer = map[string]any{"self": node, "nodes-added": []any{map[string]any{"name": node,
			"primary-address": map[string]any{"ipv4": map[string]any{"ip": nodeIP}}}}}
	case r.URL.Path == "/v1/ip":
		answer = []any{map[string]any{"cidr": r.URL.Query().Get("cidr"), "identity": CiliumFinalIdentity}}
	default:
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer)
	return true
}

func (a *CiliumAgent) stage(id string) int {
	if a.stuck >= 0 {
		return a.stuck
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	first, ok := a.firstSeen[id]
	if !ok {
		first = time.Now()
		a.firstSeen[id] = first
	}
	return min(int(time.Since(first)/a.step), len(ciliumStages)-1)
}

// LastStageAt is when the endpoint reached the programmed state.
func (a *CiliumAgent) LastStageAt(id string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.firstSeen[id].Add(time.Duration(len(ciliumStages)-1) * a.step)
}

// CiliumNet is conflists/cilium-chained.conflist with its cilium-cni entry
// taken out (the stand-in agent plays Cilium here) and the preset pointed
// at the test's socket.
func CiliumNet(t testing.TB, sock, timeout string) *cnitest.TestNet {
	return cnitest.NewNet(t, "cilium-chained.conflist", func(n *cnitest.TestNet, list map[string]any) {
		var chain []any
		for _, p := range cnitest.Plugins(list) {
			if p["type"] != "cilium-cni" {
				chain = append(chain, p)
			}
		}
		list["plugins"] = chain
		n.Netready()["timeout"] = timeout
		n.Netready()["checks"].([]any)[2].(map[string]any)["url"] = "unix://" + sock
	})
}
