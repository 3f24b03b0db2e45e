package pool

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// countingAgent is a stand-in Cilium agent that counts its answers.
func countingAgent(t *testing.T, status *atomic.Value, hits *atomic.Int32) string {
	return serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		json.NewEncoder(w).Encode(map[string]any{"ipam": map[string]any{"status": status.Load().(string)}})
	}))
}

// TestReadKept: STATUS, one process per call, reads an agent at most once
// per keptFor; a kept answer of another source, or from the future, is
// not used.
func TestReadKept(t *testing.T) {
	var status atomic.Value
	status.Store("IPv4: 3/14 allocated from 10.200.0.0/28, ")
	var hits atomic.Int32
	sock := countingAgent(t, &status, &hits)
	src, _ := New("podnet", json.RawMessage(`{"type":"cilium","socket":"`+sock+`"}`))
	path := AgentCachePath(t.TempDir(), "podnet")
	t0 := time.Now()
	type step struct {
		at   time.Duration
		said string
		hits int32
	}
	var got []step
	read := func(at time.Duration) {
		t.Helper()
		cnt, err := ReadKept(context.Background(), src, path, t0.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, step{at, cnt.Said, hits.Load()})
	}
	read(0)
	status.Store("IPv4: 4/14 allocated from 10.200.0.0/28, ")
	read(time.Second)                // kept
	read(keptFor - time.Millisecond) // kept
	read(keptFor)                    // read again
	read(-time.Minute)               // the clock went back: read again
	want := []step{
		{0, `Cilium says "IPv4: 3/14 allocated from 10.200.0.0/28"`, 1},
		{time.Second, `Cilium says "IPv4: 3/14 allocated from 10.200.0.0/28"`, 1},
		{keptFor - time.Millisecond, `Cilium says "IPv4: 3/14 allocated from 10.200.0.0/28"`, 1},
		{keptFor, `Cilium says "IPv4: 4/14 allocated from 10.200.0.0/28"`, 2},
		{-time.Minute, `Cilium says "IPv4: 4/14 allocated from 10.200.0.0/28"`, 3},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(step{})); diff != "" {
		t.Errorf("reads (-want +got):\n%s", diff)
	}
	// Another socket in the same entry is another source.
	other, _ := New("podnet", json.RawMessage(`{"type":"cilium","socket":"unix://`+filepath.Join(t.TempDir(), "none.sock")+`"}`))
	cnt, _ := ReadKept(context.Background(), other, path, t0.Add(-time.Minute+time.Second))
	if !strings.Contains(cnt.Unknown, "none.sock") {
		t.Errorf("another source's read = %+v, want its own (cannot tell: no socket)", cnt)
	}
}

// TestReadForStatusHungAgent: a STATUS that reads a hung agent answers
// within its second, cannot tell (so it passes), and the next call within
// keptFor does not wait again.
func TestReadForStatusHungAgent(t *testing.T) {
	var hits atomic.Int32
	sock := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		<-r.Context().Done()
	}))
	stateDir := t.TempDir()
	ipam := json.RawMessage(`{"type":"cilium","socket":"` + sock + `"}`)
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		cnt, err := ReadForStatus(ctx, "podnet", stateDir, ipam)
		took := time.Since(start)
		cancel()
		if took >= time.Second {
			t.Errorf("call %d took %s, want under STATUS's second", i, took)
		}
		if err != nil || cnt.Unknown == "" || cnt.Exhausted(1) != nil {
			t.Errorf("call %d = %+v, %v; want cannot tell, never exhausted", i, cnt, err)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the hung agent was asked %d times, want once (the second call uses the kept answer)", n)
	}
}

// TestReadForStatusKeepsTheMemo: ipamd's refusal counter is compared
// across STATUS calls through the kept answer, so a refusal seen between
// two calls holds the pool exhausted.
func TestReadForStatusKeepsTheMemo(t *testing.T) {
	s := newIPAMDStandIn(t, "enis-refused.json", "metrics-refused-before.txt")
	stateDir := t.TempDir()
	ipam := json.RawMessage(`{"type":"aws-vpc-cni","url":"` + s.srv.URL + `","metrics":"` + s.srv.URL + `/metrics"}`)
	cnt, err := ReadForStatus(context.Background(), "aws-cni", stateDir, ipam)
	if err != nil || cnt.Exhausted(1) != nil {
		t.Fatalf("first call = %+v, %v; want not exhausted", cnt, err)
	}
	s.metrics.Store("metrics-refused-after.txt")
	// Age the kept answer past keptFor, as time would.
	path := AgentCachePath(stateDir, "aws-cni")
	var k keptCount
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	k.At = k.At.Add(-keptFor)
	data, _ = json.Marshal(k)
	os.WriteFile(path, data, 0o644)
	cnt, err = ReadForStatus(context.Background(), "aws-cni", stateDir, ipam)
	if err != nil || cnt.Exhausted(1) == nil || !strings.Contains(cnt.Exhausted(1).Error(), "EC2 refused it more") {
		t.Errorf("second call = %+v, %v; want exhausted, naming EC2's refusal", cnt, err)
	}
}

// TestReadForStatusHostLocal: host-local reads its folder, with the same
// words as before.
func TestReadForStatusHostLocal(t *testing.T) {
	data := t.TempDir()
	allocate(t, filepath.Join(data, "podnet"), "10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6")
	ipam := json.RawMessage(`{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"}]],"dataDir":"` + data + `"}`)
	cnt, err := ReadForStatus(context.Background(), "podnet", t.TempDir(), ipam)
	if err != nil {
		t.Fatal(err)
	}
	if err := cnt.Exhausted(1); err == nil || err.Error() != "IP pool exhausted (5 of 5 addresses in use)" {
		t.Errorf("Exhausted = %v", err)
	}
}
