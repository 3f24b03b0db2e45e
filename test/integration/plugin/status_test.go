//go:build integration

package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// waitPoolCountKept calls STATUS, as a runtime does every few seconds,
// until it keeps its pool count in stateDir: once the pool folder has been
// unchanged for a few clock ticks (two seconds on a file system that keeps
// whole seconds).
func waitPoolCountKept(t *testing.T, n *cnitest.TestNet) {
	t.Helper()
	kept := pool.CachePath(n.Netready()["stateDir"].(string), n.Name)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if e, _ := n.Status(t); e != nil {
			t.Fatalf("STATUS: %+v", e)
		}
		if _, err := os.Stat(kept); err == nil {
			return
		}
	}
	t.Fatalf("STATUS never kept its pool count in %s", kept)
}

// TestStatusTellsTheTruthAboutPoolAndAgents: STATUS tells the truth about a /29 pool that real
// ADDs fill and a DEL frees, also while it keeps a count between calls, and
// about agents that go stale, unhealthy or silent, always within a second.
func TestStatusTellsTheTruthAboutPoolAndAgents(t *testing.T) {
	heartbeat := filepath.Join(t.TempDir(), "heartbeat")
	os.WriteFile(heartbeat, nil, 0o644)
	var health atomic.Int32 // 0 healthy, 1 503, 2 hang
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch health.Load() {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			<-r.Context().Done()
		}
	}))
	defer agent.Close()
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, list map[string]any) {
		ipam := cnitest.Plugins(list)[0]["ipam"].(map[string]any)
		ipam["ranges"] = []any{[]any{map[string]any{"subnet": n.Prefix + "0/29"}}}
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}}
		n.Netready()["status"] = map[string]any{
			"ipam": "auto", "confDir": n.ConfDir, "poolAction": "notready", "failAfter": "0s",
			"agents": []any{
				map[string]any{"kind": "file", "path": heartbeat, "maxAge": "30s"},
				map[string]any{"kind": "http", "url": agent.URL + "/liveness"},
			},
		}
	})
	if e, _ := n.Status(t); e != nil {
		t.Fatalf("STATUS on an empty pool: %+v", e)
	}
	var nss []string
	for i := 0; i < 5; i++ {
		if i == 4 {
			waitPoolCountKept(t, n)
		}
		ns := cnitest.NewNS(t)
		if _, err := n.Add(ns.Path()); err != nil {
			t.Fatalf("ADD %d: %v", i+1, err)
		}
		nss = append(nss, ns.Path())
	}
	// The count kept at 4 of 5 must not hide the fifth allocation.
	e, took := n.Status(t)
	want := `netready: network "` + n.Name + `": IP pool exhausted (5 of 5 addresses in use)`
	if e == nil || e.Code != types.ErrPluginNotAvailable || e.Msg != want {
		t.Errorf("STATUS with the pool full = %+v, want code 50 %q", e, want)
	}
	t.Logf("STATUS with a full pool answered in %s", took)
	sixth := cnitest.NewNS(t)
	if _, err := n.Add(sixth.Path()); err == nil || !strings.Contains(err.Error(), "no IP addresses available") {
		t.Errorf("6th ADD = %v, want host-local's exhaustion", err)
	}
	if _, err := n.Cnitool("del", nss[0]); err != nil {
		t.Fatal(err)
	}
	if e, _ := n.Status(t); e != nil {
		t.Errorf("STATUS after a DEL freed an address: %+v", e)
	}

	old := time.Now().Add(-time.Minute)
	os.Chtimes(heartbeat, old, old)
	if e, _ := n.Status(t); e == nil || e.Code != 50 || !strings.Contains(e.Msg, "agent file "+heartbeat+" is stale") {
		t.Errorf("STATUS with a stale heartbeat = %+v", e)
	}
	os.Chtimes(heartbeat, time.Now(), time.Now())

	health.Store(1)
	if e, _ := n.Status(t); e == nil || e.Code != 50 || !strings.Contains(e.Msg, "agent "+agent.URL+"/liveness is not healthy: answered 503") {
		t.Errorf("STATUS with an unhealthy agent = %+v", e)
	}
	health.Store(2)
	e, took = n.Status(t)
	if e == nil || e.Code != 50 || !strings.Contains(e.Msg, "agent "+agent.URL+"/liveness is not healthy: no answer") {
		t.Errorf("STATUS with a hanging agent = %+v", e)
	}
	if took > 2*time.Second {
		t.Errorf("STATUS with a hanging agent took %s; the contract says under 1 s", took)
	}
	t.Logf("STATUS with a hanging agent answered in %s", took)
	health.Store(0)
	if e, _ := n.Status(t); e != nil {
		t.Errorf("STATUS once the agent recovered: %+v", e)
	}
}

// TestStatusReadsTheSidecarsCount: with the real sidecar watching a pool
// that STATUS counts (poolAction "notready"), every real ADD and DEL leaves
// a count kept for the folder as it now is, without any STATUS call; STATUS
// answers from it, and its answers stay true as the pool fills and frees.
func TestStatusReadsTheSidecarsCount(t *testing.T) {
	a := kube.StartAPIServer(t)
	if _, err := a.Admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: kube.SidecarNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, list map[string]any) {
		ipam := cnitest.Plugins(list)[0]["ipam"].(map[string]any)
		ipam["ranges"] = []any{[]any{map[string]any{"subnet": n.Prefix + "0/29"}}}
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}}
		n.Netready()["status"] = map[string]any{"ipam": "auto", "confDir": n.ConfDir, "poolAction": "notready"}
	})
	// No resync: the allocations' inotify events alone must drive it.
	kube.StartSidecar(t, a, n.StateDir, kube.SidecarNode, "--cni-conf-dir", n.ConfDir, "--pool-resync", "1h")
	kept := pool.CachePath(n.StateDir, n.Name)
	waitKept := func(used int64) {
		t.Helper()
		harness.Within(t, fmt.Sprintf("the sidecar kept %d in use for the folder as it is now", used), 10*time.Second, func() bool {
			info, err := os.Stat(n.IPAMDir)
			c, ok := cnitest.ReadKeptCount(kept)
			return err == nil && ok && c.MtimeNs == info.ModTime().UnixNano() && slices.Equal(c.Used, []int64{used})
		})
	}
	var nss []string
	for i := 1; i <= 4; i++ {
		ns := cnitest.NewNS(t)
		if _, err := n.Add(ns.Path()); err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		nss = append(nss, ns.Path())
		waitKept(int64(i))
	}
	if e, _ := n.Status(t); e != nil {
		t.Fatalf("STATUS at 4 of 5: %+v", e)
	}
	// Only the kept count says 5: STATUS answering with it shows that it
	// took the sidecar's count instead of reading the folder.
	// json.Number: mtimeNs and the inode do not survive a float64.
	var c map[string]any
	b, _ := os.ReadFile(kept)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("the kept count %s: %v", kept, err)
	}
	c["used"] = []int64{5}
	if b, _ = json.Marshal(c); os.WriteFile(kept, b, 0o644) != nil {
		t.Fatalf("cannot rewrite %s", kept)
	}
	full := `netready: network "` + n.Name + `": IP pool exhausted (5 of 5 addresses in use)`
	if e, _ := n.Status(t); e == nil || e.Msg != full {
		t.Fatalf("STATUS with a kept count of 5 = %+v, want %q: it did not read the sidecar's count", e, full)
	}
	ns := cnitest.NewNS(t)
	if _, err := n.Add(ns.Path()); err != nil {
		t.Fatalf("ADD 5: %v", err)
	}
	nss = append(nss, ns.Path())
	waitKept(5)
	if e, _ := n.Status(t); e == nil || e.Code != types.ErrPluginNotAvailable || e.Msg != full {
		t.Errorf("STATUS with the pool full = %+v, want code 50 %q", e, full)
	}
	if _, err := n.Cnitool("del", nss[0]); err != nil {
		t.Fatal(err)
	}
	waitKept(4)
	if e, _ := n.Status(t); e != nil {
		t.Errorf("STATUS after a DEL freed an address: %+v", e)
	}
}
