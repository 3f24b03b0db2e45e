//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
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
	{"id": 1742, "status": map[string]any{"state": "ready", "identity": map[string]any{"id": 48861, "labels": []string{"k8s:app=web"}},
		"policy": map[string]any{"realized": map[string]any{"policy-revision": 8}, "spec": map[string]any{"policy-revision": 8}}}},
}

// ciliumAgent stands in for cilium-agent's REST API on a unix socket: each
// endpoint walks through ciliumStages, one stage per step after it is
// first asked for, or stays at stuck when that is >= 0.
type ciliumAgent struct {
	step  time.Duration
	stuck int

	mu        sync.Mutex
	firstSeen map[string]time.Time
}

func startCiliumAgent(t testing.TB, sock string, step time.Duration, stuck int) *ciliumAgent {
	t.Helper()
	a := &ciliumAgent{step: step, stuck: stuck, firstSeen: map[string]time.Time{}}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(a.serve)}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return a
}

func (a *ciliumAgent) serve(w http.ResponseWriter, r *http.Request) {
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

func (a *ciliumAgent) stage(id string) int {
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

// lastStageAt is when the endpoint reached the programmed state.
func (a *ciliumAgent) lastStageAt(id string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.firstSeen[id].Add(time.Duration(len(ciliumStages)-1) * a.step)
}

// ciliumNet is conflists/cilium-chained.conflist with its cilium-cni entry
// taken out (the stand-in agent plays Cilium here) and the preset pointed
// at the test's socket.
func ciliumNet(t testing.TB, sock, timeout string) *testNet {
	return newNet(t, "cilium-chained.conflist", func(n *testNet, list map[string]any) {
		var chain []any
		for _, p := range plugins(list) {
			if p["type"] != "cilium-cni" {
				chain = append(chain, p)
			}
		}
		list["plugins"] = chain
		n.Netready()["timeout"] = timeout
		n.Netready()["checks"].([]any)[2].(map[string]any)["url"] = "unix://" + sock
	})
}

// TestCiliumPreset: ADD holds through every state a fresh Cilium endpoint
// goes through (absent, waiting-for-identity, regenerating, ready on the
// init identity, ready on an old policy revision) and returns only once
// the endpoint is ready with its own identity and current policy. A stuck
// endpoint, a hanging agent and an agent that is not running each time out
// with a message saying what was seen.
func TestCiliumPreset(t *testing.T) {
	ctx := context.Background()
	t.Run("walks every state", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "cilium.sock")
		agent := startCiliumAgent(t, sock, 300*time.Millisecond, -1)
		n := ciliumNet(t, sock, "10s")
		cni, list := n.libcni()
		netns := newNS(t)
		rt := &libcni.RuntimeConf{ContainerID: "cil-" + n.ID, NetNS: netns.Path(), IfName: "eth0"}
		t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
		if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		returned := time.Now()
		ready := agent.lastStageAt("cni-attachment-id:" + rt.ContainerID + ":eth0")
		t.Logf("ADD returned %v after the endpoint reached its programmed state", returned.Sub(ready).Round(time.Millisecond))
		if returned.Before(ready) {
			t.Errorf("ADD returned %v before the endpoint was programmed", ready.Sub(returned))
		}
		m := n.readMarker(rt.ContainerID, "eth0")
		if m.State != "ready" || !strings.Contains(m.Checks[len(m.Checks)-1].Target, "cilium endpoint cni-attachment-id:"+rt.ContainerID+":eth0") {
			t.Errorf("marker = %+v", m)
		}
	})
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, sock string)
		want  string
	}{
		{"stuck on the init identity", func(t *testing.T, sock string) { startCiliumAgent(t, sock, time.Hour, 3) }, "has the init identity (5)"},
		{"stuck on an old policy revision", func(t *testing.T, sock string) { startCiliumAgent(t, sock, time.Hour, 4) }, "policy revision 7 realized, 8 desired"},
		{"endpoint never created", func(t *testing.T, sock string) { startCiliumAgent(t, sock, time.Hour, 0) }, "not there yet (404)"},
		{"agent not running", func(t *testing.T, sock string) {}, "no such file or directory"},
		{"hanging agent", func(t *testing.T, sock string) {
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					t.Cleanup(func() { c.Close() }) // read nothing, answer nothing
				}
			}()
		}, "no answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "cilium.sock")
			tc.setup(t, sock)
			n := ciliumNet(t, sock, "1500ms")
			cni, list := n.libcni()
			netns := newNS(t)
			rt := &libcni.RuntimeConf{ContainerID: "cil-" + n.ID, NetNS: netns.Path(), IfName: "eth0"}
			t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
			start := time.Now()
			_, err := cni.AddNetworkList(ctx, list, rt)
			took := time.Since(start)
			if cniCode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "cilium endpoint cni-attachment-id:") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ADD = %v (code %d), want code 11 naming the endpoint and %q", err, cniCode(err), tc.want)
			}
			if took > 6*time.Second {
				t.Errorf("a 1.5s timeout took %v", took)
			}
		})
	}
}

// TestStatusAgentExpect: a generic expect list on a STATUS agent, through
// libcni: STATUS fails naming the field while the agent's answer says it is
// not healthy, and passes once it is.
func TestStatusAgentExpect(t *testing.T) {
	var healthy sync.Mutex
	state := "degraded"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		healthy.Lock()
		defer healthy.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"cilium": map[string]any{"state": state}})
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	n := newNet(t, "bridge.conflist", func(n *testNet, _ map[string]any) {
		n.Netready()["status"] = map[string]any{"failAfter": "0s", "agents": []any{map[string]any{"kind": "http", "url": "http://" + l.Addr().String() + "/v1/healthz",
			"expect": []any{map[string]any{"path": "cilium.state", "equals": "Ok"}}}}}
	})
	cni, list := n.libcni()
	err = cni.GetStatusNetworkList(context.Background(), list)
	if cniCode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), `cilium.state is "degraded", want "Ok"`) {
		t.Errorf("STATUS with a degraded agent = %v, want code 50 naming the field", err)
	}
	healthy.Lock()
	state = "Ok"
	healthy.Unlock()
	if err := cni.GetStatusNetworkList(context.Background(), list); err != nil {
		t.Errorf("STATUS with a healthy agent = %v", err)
	}
}
