package pending

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/marker"
)

// pendingMarker writes a pending marker whose one check is the file flag,
// with extra keys in its "pending" object, as a plugin's JSON.
func pendingMarker(t *testing.T, s marker.Store, flag, pendingExtra string) *marker.Marker {
	t.Helper()
	data := `{"version": 1, "network": "podnet", "containerID": "c1", "ifName": "eth0", "netns": "",
		"pod": {"namespace": "default", "name": "web-0", "uid": "u1"}, "ips": ["10.200.0.5/24"],
		"state": "pending", "createdAt": "` + time.Now().UTC().Format(time.RFC3339Nano) + `", "waitedMs": 500,
		"checks": [{"kind": "file", "target": "` + flag + `", "ready": false, "waitedMs": 0}],
		"pending": {"checks": [{"kind": "file", "path": "` + flag + `"}]` + pendingExtra + `}}`
	if err := os.MkdirAll(filepath.Join(s.Dir, "podnet"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(s.Dir, "podnet", "c1_eth0.json")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := s.Read(marker.Key{Network: "podnet", ContainerID: "c1", IfName: "eth0"})
	if err != nil {
		t.Fatalf("reading the marker back: %v", err)
	}
	return m
}

// TestRecheckOfAMarkerWithoutCrossNodeWaitsForTheLocalChecksAlone: a
// pending marker as a plugin before crossNode wrote it (no crossNode in
// "pending") turns ready once its own checks hold, as before, with no
// cross-node result.
func TestRecheckOfAMarkerWithoutCrossNodeWaitsForTheLocalChecksAlone(t *testing.T) {
	dir := t.TempDir()
	s := marker.Store{Dir: filepath.Join(dir, "state")}
	flag := filepath.Join(dir, "programmed")
	m := pendingMarker(t, s, flag, "")
	if m.Pending.CrossNode != nil {
		t.Fatalf("crossNode = %+v from a marker without it", m.Pending.CrossNode)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := Recheck(ctx, Inputs{Store: s}, m, Schedule{Round: 50 * time.Millisecond, Patience: time.Minute, MaxGap: time.Second}, func(*marker.Marker) {})
	if err != nil {
		t.Fatalf("Recheck = %v", err)
	}
	if got.State != marker.StateReady {
		t.Errorf("state = %s, want ready", got.State)
	}
	for _, c := range got.Checks {
		if c.Kind == checks.KindOVNCrossNode {
			t.Errorf("a cross-node result %+v in a marker that asked for none", c)
		}
	}
}

// TestRecheckWithCrossNodeIsNeverReadyWhenItCannotTell: once the local
// checks hold, a marker with crossNode waits for the other nodes; with
// OVN's databases out of reach (nothing listens on the sockets) it cannot
// tell, so it stays pending, its progress naming the cross-node part
// and why, until its context ends.
func TestRecheckWithCrossNodeIsNeverReadyWhenItCannotTell(t *testing.T) {
	dir := t.TempDir()
	s := marker.Store{Dir: filepath.Join(dir, "state")}
	flag := filepath.Join(dir, "programmed")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m := pendingMarker(t, s, flag, `, "crossNode": {"timeout": "300ms", "stallAfter": "200ms",
		"nbSocket": "`+dir+`/nb.sock", "sbSocket": "`+dir+`/sb.sock"}, "ovnIfaceID": "default_web-0"`)
	want := config.CrossNodeConf{TimeoutRaw: "300ms", StallAfterRaw: "200ms", NBSocket: dir + "/nb.sock", SBSocket: dir + "/sb.sock"}
	if m.Pending.CrossNode == nil || *m.Pending.CrossNode != want || m.Pending.OVNIfaceID != "default_web-0" {
		t.Fatalf("pending = %+v, want crossNode %+v and the iface-id", m.Pending, want)
	}
	var mu sync.Mutex
	var last *marker.Marker
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err := Recheck(ctx, Inputs{Store: s}, m, Schedule{Round: 200 * time.Millisecond, Patience: time.Minute, MaxGap: time.Second}, func(p *marker.Marker) {
		mu.Lock()
		defer mu.Unlock()
		last = p
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Recheck = %v, want it to go on until its context ends", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if last == nil {
		t.Fatal("no progress")
	}
	var cross *marker.CheckResult
	for i, c := range last.Checks {
		switch {
		case c.Kind == checks.KindOVNCrossNode:
			cross = &last.Checks[i]
		case !c.Ready:
			t.Errorf("local check %+v not ready, though its file exists", c)
		}
	}
	if cross == nil || cross.Ready || !strings.Contains(cross.Why, "sb.sock") {
		t.Errorf("progress's cross-node result = %+v, want not ready, naming the socket it cannot reach", cross)
	}
	if last.State != marker.StatePending || last.Pending == nil || last.Pending.CrossNode == nil {
		t.Errorf("progress = %+v, want pending, still carrying crossNode", last)
	}
	if got, err := s.Read(marker.Key{Network: "podnet", ContainerID: "c1", IfName: "eth0"}); err != nil || got.State != marker.StatePending {
		t.Errorf("marker on disk = %+v, %v; want it still pending", got, err)
	}
}

// TestRecheckRefusesABadCrossNode: a marker whose crossNode the plugin
// would have refused (edited by hand) ends the re-check with an error
// naming the key, rather than waiting on something else.
func TestRecheckRefusesABadCrossNode(t *testing.T) {
	dir := t.TempDir()
	s := marker.Store{Dir: filepath.Join(dir, "state")}
	m := pendingMarker(t, s, filepath.Join(dir, "programmed"), `, "crossNode": {"nbSocket": "nb.sock"}`)
	var shown *marker.Marker
	_, err := Recheck(context.Background(), Inputs{Store: s}, m, Schedule{Round: 50 * time.Millisecond}, func(p *marker.Marker) { shown = p })
	if err == nil || !strings.Contains(err.Error(), "crossNode") || !strings.Contains(err.Error(), "nbSocket") {
		t.Errorf("Recheck = %v, want an error naming crossNode's nbSocket", err)
	}
	// The pod's condition comes from what progress was given.
	if shown == nil || shown.State != marker.StatePending || !strings.Contains(fmt.Sprint(shown.Checks), "nbSocket") {
		t.Errorf("progress got %+v, want the pending marker with a check naming crossNode's nbSocket", shown)
	}
}
