//go:build integration

package cilium

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

	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestCiliumPresetHoldsADDUntilTheEndpointIsReady: ADD holds through every state a fresh Cilium endpoint
// goes through (absent, waiting-for-identity, regenerating, ready on the
// init identity, ready on an old policy revision) and returns only once
// the endpoint is ready with its own identity and current policy. A stuck
// endpoint, a hanging agent and an agent that is not running each time out
// with a message saying what was seen.
func TestCiliumPresetHoldsADDUntilTheEndpointIsReady(t *testing.T) {
	ctx := context.Background()
	t.Run("walks every state", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "cilium.sock")
		agent := agents.StartCiliumAgent(t, sock, 300*time.Millisecond, -1)
		n := agents.CiliumNet(t, sock, "10s")
		cni, list := n.Libcni()
		netns := cnitest.NewNS(t)
		rt := &libcni.RuntimeConf{ContainerID: "cil-" + n.ID, NetNS: netns.Path(), IfName: "eth0"}
		t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
		if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		returned := time.Now()
		ready := agent.LastStageAt("cni-attachment-id:" + rt.ContainerID + ":eth0")
		t.Logf("ADD returned %v after the endpoint reached its programmed state", returned.Sub(ready).Round(time.Millisecond))
		if returned.Before(ready) {
			t.Errorf("ADD returned %v before the endpoint was programmed", ready.Sub(returned))
		}
		m := n.ReadMarker(rt.ContainerID, "eth0")
		if m.State != "ready" || !strings.Contains(m.Checks[len(m.Checks)-1].Target, "cilium endpoint cni-attachment-id:"+rt.ContainerID+":eth0") {
			t.Errorf("marker = %+v", m)
		}
	})
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, sock string)
		want  string
	}{
		{"stuck on the init identity", func(t *testing.T, sock string) { agents.StartCiliumAgent(t, sock, time.Hour, 3) }, "has the init identity (5)"},
		{"stuck on an old policy revision", func(t *testing.T, sock string) { agents.StartCiliumAgent(t, sock, time.Hour, 4) }, "policy revision 7 realized, 8 desired"},
		{"endpoint never created", func(t *testing.T, sock string) { agents.StartCiliumAgent(t, sock, time.Hour, 0) }, "not there yet (404)"},
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
			n := agents.CiliumNet(t, sock, "1500ms")
			cni, list := n.Libcni()
			netns := cnitest.NewNS(t)
			rt := &libcni.RuntimeConf{ContainerID: "cil-" + n.ID, NetNS: netns.Path(), IfName: "eth0"}
			t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
			start := time.Now()
			_, err := cni.AddNetworkList(ctx, list, rt)
			took := time.Since(start)
			if cnitest.CNICode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "cilium endpoint cni-attachment-id:") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ADD = %v (code %d), want code 11 naming the endpoint and %q", err, cnitest.CNICode(err), tc.want)
			}
			if took > 6*time.Second {
				t.Errorf("a 1.5s timeout took %v", took)
			}
		})
	}
}

// TestStatusFailsUntilTheAgentMeetsExpect: a generic expect list on a STATUS agent, through
// libcni: STATUS fails naming the field while the agent's answer says it is
// not healthy, and passes once it is.
func TestStatusFailsUntilTheAgentMeetsExpect(t *testing.T) {
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
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["status"] = map[string]any{"failAfter": "0s", "agents": []any{map[string]any{"kind": "http", "url": "http://" + l.Addr().String() + "/v1/healthz",
			"expect": []any{map[string]any{"path": "cilium.state", "equals": "Ok"}}}}}
	})
	cni, list := n.Libcni()
	err = cni.GetStatusNetworkList(context.Background(), list)
	if cnitest.CNICode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), `cilium.state is "degraded", want "Ok"`) {
		t.Errorf("STATUS with a degraded agent = %v, want code 50 naming the field", err)
	}
	healthy.Lock()
	state = "Ok"
	healthy.Unlock()
	if err := cni.GetStatusNetworkList(context.Background(), list); err != nil {
		t.Errorf("STATUS with a healthy agent = %v", err)
	}
}
