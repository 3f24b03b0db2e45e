package status

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		{"sick http agent", `"status":{"agents":[{"kind":"http","url":"` + sick.URL + `/live"}]}`, "agent " + sick.URL + "/live is not healthy: answered 503"},
		{"stale heartbeat", `"status":{"agents":[{"kind":"file","path":"` + stale + `","maxAge":"30s"}]}`, "agent file " + stale + " is stale: last written 1h0m0s ago (maxAge 30s)"},
		{"missing heartbeat", `"status":{"agents":[{"kind":"file","path":"` + dir + `/none"}]}`, "agent file " + dir + "/none does not exist: is the agent running?"},
		{"pool exhausted", `"status":{"poolAction":"notready","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"}]],"dataDir":"` + data + `"}}`, "IP pool exhausted (5 of 5 addresses in use)"},
		{"pool below minFree", `"status":{"minFree":9,"poolAction":"notready","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/28"}]],"dataDir":"` + data + `"}}`, "IP pool below minFree 9 (5 of 13 addresses in use)"},
		{"minFree 0 never fails on the pool", `"status":{"minFree":0,"poolAction":"notready","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"}]],"dataDir":"` + data + `"}}`, ""},
		{"poolAction taint (the default) leaves an exhausted pool to the sidecar", `"status":{"ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"}]],"dataDir":"` + data + `"}}`, ""},
		{"a hanging agent is cut at the budget", `"status":{"agents":[{"kind":"http","url":"` + hang.URL + `"}]}`, "agent " + hang.URL + " is not healthy: no answer"},
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
