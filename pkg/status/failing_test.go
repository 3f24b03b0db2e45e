package status

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/marker"
)

// TestFailingRecordSurvivesGC: the record of failing agents is written
// while GC runs on the same folder (containerd calls both); GC leaves the
// record's fresh temp file alone, so every write completes.
func TestFailingRecordSurvivesGC(t *testing.T) {
	dir := tmpfs(t, "size=1m")
	agents := []config.AgentConf{{Kind: config.AgentHTTP, URL: "http://127.0.0.1:9/a"}, {Kind: config.AgentFile, Path: "/run/b"}}
	a, b := agentKey(&agents[0]), agentKey(&agents[1])
	boom := errors.New("not healthy")
	os.MkdirAll(filepath.Join(dir, "podnet"), 0o755)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := marker.Store{Dir: dir}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.GC("podnet", []marker.Key{}, time.Now()); err != nil {
				t.Errorf("GC: %v", err)
				return
			}
		}
	}()
	t0 := time.Now()
	var failed []string
	for i := range 2000 {
		// The failing agent changes each time, so each call writes.
		errs := map[string]error{a: boom}
		if i%2 == 1 {
			errs = map[string]error{b: boom}
		}
		if _, err := judgeAgents(dir, "podnet", agents, errs, 30*time.Second, t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
			failed = append(failed, err.Error())
		}
	}
	close(stop)
	wg.Wait()
	if len(failed) > 0 {
		t.Errorf("%d of 2000 writes of the record failed while GC ran, e.g. %s", len(failed), failed[0])
	}
}

// TestFullStateDirIsNoFirstFailure: on a real tmpfs that is full (ENOSPC
// on /run), STATUS cannot record that an agent began failing. An agent
// that just began counts as just begun, and STATUS stays green within
// failAfter; one whose failure the record already held for longer than
// failAfter is reported.
func TestFullStateDirIsNoFirstFailure(t *testing.T) {
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	defer sick.Close()
	state := tmpfs(t, "size=256k")

	conf, err := config.Parse([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"podnet","type":"netready","stateDir":%q,
		"status":{"failAfter":"30s","agents":[{"kind":"http","url":"%s/old"},{"kind":"http","url":"%s/new"}]}}`, state, sick.URL, sick.URL)))
	if err != nil {
		t.Fatal(err)
	}
	// The old agent has failed for a minute, by the record.
	old := &conf.Status.Agents[0]
	if err := writeFailing(failingPath(state, "podnet"), failing{agentKey(old): time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	check := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
		defer cancel()
		return Check(ctx, conf)
	}
	fill(t, state)
	err = check()
	if err == nil || !strings.Contains(err.Error(), sick.URL+"/old is not healthy") {
		t.Errorf("Check = %v, want the agent failing for a minute by the record", err)
	}
	if err != nil && strings.Contains(err.Error(), sick.URL+"/new") {
		t.Errorf("Check = %v, want no word of the agent that just began failing", err)
	}
	// Without any record either, a new failure is no failure yet.
	os.Remove(failingPath(state, "podnet"))
	fill(t, state)
	conf.Status.Agents = conf.Status.Agents[1:]
	if err := check(); err != nil {
		t.Errorf("Check = %v, want green: the agent just began failing (failAfter 30s)", err)
	}
}

// tmpfs mounts a tmpfs, as /run is on a node, for the test.
func tmpfs(t *testing.T, opts string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a tmpfs: run `make test` as root")
	}
	dir := filepath.Join(t.TempDir(), "state")
	os.MkdirAll(dir, 0o755)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// fill writes to dir until its file system is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.CreateTemp(dir, "filler")
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return
		}
		t.Fatal(err)
	}
	defer f.Close()
	for chunk := make([]byte, 4096); ; {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("filling the tmpfs: %v", err)
			}
			return
		}
	}
}
