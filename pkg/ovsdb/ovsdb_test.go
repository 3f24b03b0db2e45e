package ovsdb

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestMapValue(t *testing.T) {
	col := json.RawMessage(`["map",[["iface-id","default_web-0"],["ovn-installed","true"],["sandbox","abc"]]]`)
	tests := []struct {
		key, want string
		ok        bool
	}{
		{"ovn-installed", "true", true},
		{"iface-id", "default_web-0", true},
		{"iface-id-ver", "", false},
	}
	for _, tt := range tests {
		if got, ok := MapValue(col, tt.key); got != tt.want || ok != tt.ok {
			t.Errorf("MapValue(%s) = %q %v, want %q %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
	for _, bad := range []string{`["set",[]]`, `"x"`, `["map",{}]`, `null`} {
		if _, ok := MapValue(json.RawMessage(bad), "k"); ok {
			t.Errorf("MapValue(%s) found a value", bad)
		}
	}
}

// fakeServer answers one connection on a unix socket with serve.
func fakeServer(t *testing.T, serve func(dec *json.Decoder, conn net.Conn)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "db.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		serve(json.NewDecoder(conn), conn)
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return sock
}

// TestMonitorWaitsForTheReply: Monitor returns only once the server has
// answered the monitor request (so no change made after it is missed),
// answers the server's echo meanwhile, returns the server's refusal as an
// error, and gives up on a server that never answers.
func TestMonitorWaitsForTheReply(t *testing.T) {
	var replied atomic.Bool
	tests := []struct {
		name    string
		serve   func(dec *json.Decoder, conn net.Conn)
		wantErr string
	}{
		{"a slow reply, after an echo", func(dec *json.Decoder, conn net.Conn) {
			var req message
			dec.Decode(&req)
			conn.Write([]byte(`{"method":"echo","params":[],"id":"echo"}`))
			var echo message
			if dec.Decode(&echo) != nil || string(echo.ID) != `"echo"` {
				return // no echo answer: no reply either
			}
			time.Sleep(200 * time.Millisecond)
			replied.Store(true)
			conn.Write([]byte(`{"id":` + string(req.ID) + `,"result":{},"error":null}`))
			conn.Write([]byte(`{"method":"update","params":[null,{}],"id":null}`))
			io.Copy(io.Discard, conn)
		}, ""},
		{"refused", func(dec *json.Decoder, conn net.Conn) {
			var req message
			dec.Decode(&req)
			conn.Write([]byte(`{"id":` + string(req.ID) + `,"result":null,"error":"unknown database"}`))
		}, "refused: \"unknown database\""},
		{"never answered", func(dec *json.Decoder, conn net.Conn) {
			io.Copy(io.Discard, conn)
		}, "no answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := fakeServer(t, tt.serve)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			updates, err := Monitor(ctx, sock, "Open_vSwitch", "Interface", []string{"external_ids"})
			if took := time.Since(start); took > 4*time.Second {
				t.Errorf("Monitor took %s with a 1 s context", took)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Monitor = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !replied.Load() {
				t.Error("Monitor returned before the server answered the monitor request")
			}
			select {
			case <-updates:
			case <-time.After(5 * time.Second):
				t.Error("no update after the reply")
			}
		})
	}
}
