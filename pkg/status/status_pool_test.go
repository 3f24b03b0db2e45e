package status

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netready/netready/pkg/config"
)

// TestCheckPoolAgents: STATUS with poolAction "notready" and an agent
// source fails on an exhausted pool, naming the agent's count, and passes
// when the agent cannot tell (hung, or gone) within its second.
func TestCheckPoolAgents(t *testing.T) {
	serve := func(h http.HandlerFunc) string {
		sock := filepath.Join(t.TempDir(), "c.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return "unix://" + sock
	}
	full := serve(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"ipam": map[string]any{"status": "IPv4: 14/14 allocated from 10.200.95.0/28, "}})
	})
	room := serve(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"ipam": map[string]any{"status": "IPv4: 5/14 allocated from 10.200.95.0/28, "}})
	})
	hung := serve(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	tests := []struct {
		name, socket, want string
	}{
		{"exhausted", full, `IP pool exhausted (14 of 14 addresses in use): Cilium says "IPv4: 14/14 allocated from 10.200.95.0/28"`},
		{"room", room, ""},
		{"hung agent", hung, ""},
		{"no agent", "unix://" + filepath.Join(t.TempDir(), "none.sock"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf, err := config.Parse([]byte(`{"cniVersion":"1.1.0","name":"podnet","type":"netready","stateDir":"` + t.TempDir() +
				`","status":{"ipam":{"type":"cilium","socket":"` + tt.socket + `"},"poolAction":"notready"}}`))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
			defer cancel()
			start := time.Now()
			err = Check(ctx, conf)
			if took := time.Since(start); took >= time.Second {
				t.Errorf("STATUS took %s, want under a second", took)
			}
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want && !(tt.want != "" && strings.Contains(got, tt.want)) {
				t.Errorf("Check = %q, want %q", got, tt.want)
			}
		})
	}
}
