package status

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/config"
)

func TestCheck(t *testing.T) {
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer healthy.Close()
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	defer sick.Close()
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()

	dir := t.TempDir()
	fresh, stale := filepath.Join(dir, "fresh"), filepath.Join(dir, "stale")
	os.WriteFile(fresh, nil, 0o644)
	os.WriteFile(stale, nil, 0o644)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)
	data := filepath.Join(dir, "ipam")
	// Five addresses allocated, as host-local records them.
	os.MkdirAll(filepath.Join(data, "podnet"), 0o755)
	for _, ip := range []string{"10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"} {
		os.WriteFile(filepath.Join(data, "podnet", ip), []byte("cid\r\neth0"), 0o644)
	}

	tests := []struct {
		name   string
		status string
		want   string // "" for healthy
	}{
		{"no status block", ``, ""},
		{"healthy agents", `"status":{"agents":[{"kind":"http","url":"` + healthy.URL + `"},{"kind":"file","path":"` + fresh + `","maxAge":"30s"}]}`, ""},
		{"sick http agent", `"status":{"failAfter":"0s","agents":[{"kind":"http","url":"` + sick.URL + `/live"}]}`, "agent " + sick.URL + "/live is not healthy: answered 503"},
		{"stale heartbeat", `"status":{"failAfter":"0s","agents":[{"kind":"file","path":"` + stale + `","maxAge":"30s"}]}`, "agent file " + stale + " is stale: last written 1h0m0s ago (maxAge 30s)"},
		{"missing heartbeat", `"status":{"failAfter":"0s","agents":[{"kind":"file","path":"` + dir + `/none"}]}`, "agent file " + dir + "/none does not exist: is the agent running?"},
		{"pool exhausted", `"status":{"poolAction":"notready","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"}]],"dataDir":"` + data + `"}}`, "IP pool exhausted (5 of 5 addresses in use)"},
		{"pool below minFree", `"status":{"minFree":9,"poolAction":"notready","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/28"}]],"dataDir":"` + data + `"}}`, "IP pool below minFree 9 (5 of 13 addresses in use)"},
		{"minFree 0 never fails on the pool", `"status":{"minFree":0,"poolAction":"notready","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"}]],"dataDir":"` + data + `"}}`, ""},
		{"poolAction taint (the default) leaves an exhausted pool to the sidecar", `"status":{"ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"}]],"dataDir":"` + data + `"}}`, ""},
		{"a sick agent within failAfter (default 30s) leaves STATUS green", `"status":{"agents":[{"kind":"http","url":"` + sick.URL + `/live"}]}`, ""},
		{"a hanging agent is cut at the budget", `"status":{"failAfter":"0s","agents":[{"kind":"http","url":"` + hang.URL + `"}]}`, "agent " + hang.URL + " is not healthy: no answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := `{"cniVersion":"1.1.0","name":"podnet","type":"netready","stateDir":"` + dir + `/state"`
			if tt.status != "" {
				raw += "," + tt.status
			}
			conf, err := config.Parse([]byte(raw + "}"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
			defer cancel()
			start := time.Now()
			err = Check(ctx, conf)
			if took := time.Since(start); took > 1500*time.Millisecond {
				t.Errorf("Check took %s", took)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Check = %v, want healthy", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Check = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestFailAfter: an agent fails STATUS only once it has failed without a
// break for failAfter, counted across calls (each a new process) in the
// state folder; one answer clears the count.
func TestFailAfter(t *testing.T) {
	dir := t.TempDir()
	agents := []config.AgentConf{{Kind: config.AgentHTTP, URL: "http://127.0.0.1:9/a"}, {Kind: config.AgentFile, Path: "/run/b"}}
	a, b := agentKey(&agents[0]), agentKey(&agents[1])
	boom := errors.New("agent a is not healthy: answered 503")
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		after time.Duration
		errs  map[string]error
		want  []string
	}{
		{0, map[string]error{a: boom}, nil},
		{10 * time.Second, map[string]error{a: boom}, nil},
		{30 * time.Second, map[string]error{a: boom, b: errors.New("b stale")}, []string{"agent a is not healthy: answered 503 (failing for 30s, status.failAfter 30s)"}},
		{35 * time.Second, map[string]error{}, nil},
		{40 * time.Second, map[string]error{a: boom}, nil},
		{69 * time.Second, map[string]error{a: boom}, nil},
		{70 * time.Second, map[string]error{a: boom}, []string{"agent a is not healthy: answered 503 (failing for 30s, status.failAfter 30s)"}},
	}
	for _, st := range steps {
		got, err := judgeAgents(dir, "podnet", agents, st.errs, 30*time.Second, t0.Add(st.after))
		if err != nil {
			t.Fatal(err)
		}
		var msgs []string
		for _, e := range got {
			msgs = append(msgs, e.Error())
		}
		if diff := cmp.Diff(st.want, msgs); diff != "" {
			t.Errorf("after %s (-want +got):\n%s", st.after, diff)
		}
	}
	if _, err := judgeAgents(dir, "podnet", agents, map[string]error{}, 30*time.Second, t0.Add(80*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(failingPath(dir, "podnet")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the record stays once every agent answers: %v", err)
	}
	got, _ := judgeAgents(dir, "podnet", agents, map[string]error{a: boom}, 0, t0)
	if len(got) != 1 {
		t.Errorf("failAfter 0s: %v, want the failure at once", got)
	}
}
