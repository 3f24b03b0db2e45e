package writegate

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestIsWrite: what the gate holds, and what it lets through while closed.
func TestIsWrite(t *testing.T) {
	got := map[string]bool{}
	for _, r := range []struct{ method, url string }{
		{"GET", "/api/v1/pods?watch=true"},
		{"HEAD", "/api/v1/nodes/n"},
		{"PATCH", "/api/v1/namespaces/d/pods/p/status"},
		{"PATCH", "/api/v1/namespaces/d/pods/p/status?dryRun=All"},
		{"PATCH", "/api/v1/nodes/n"},
		{"POST", "/apis/events.k8s.io/v1/namespaces/d/events"},
		{"POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews"},
		{"PUT", "/api/v1/nodes/n/status"},
		{"DELETE", "/api/v1/namespaces/d/pods/p"},
	} {
		req := httptest.NewRequest(r.method, r.url, nil)
		got[r.method+" "+r.url] = IsWrite(req)
	}
	want := map[string]bool{
		"GET /api/v1/pods?watch=true":                            false,
		"HEAD /api/v1/nodes/n":                                   false,
		"PATCH /api/v1/namespaces/d/pods/p/status":               true,
		"PATCH /api/v1/namespaces/d/pods/p/status?dryRun=All":    false,
		"PATCH /api/v1/nodes/n":                                  true,
		"POST /apis/events.k8s.io/v1/namespaces/d/events":        true,
		"POST /apis/authentication.k8s.io/v1/selfsubjectreviews": false,
		"PUT /api/v1/nodes/n/status":                             true,
		"DELETE /api/v1/namespaces/d/pods/p":                     true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("IsWrite (-want +got):\n%s", diff)
	}
}

// TestGate: a closed gate holds writes (not reads) until it opens, or
// fails them, wrapping ErrHeld and its reason, when the request's
// context ends first; closing it again holds the next write.
func TestGate(t *testing.T) {
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	defer srv.Close()
	g := New(errors.New("not proved yet"), time.Minute)
	client := &http.Client{Transport: g.Wrap(http.DefaultTransport)}
	do := func(method string, within time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+"/api/v1/nodes/n", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := do("GET", time.Second); err != nil {
		t.Fatalf("a read through the closed gate = %v", err)
	}
	err := do("PATCH", 100*time.Millisecond)
	if !errors.Is(err, ErrHeld) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write through the closed gate = %v, want ErrHeld and the deadline", err)
	}
	if served.Load() != 1 {
		t.Fatalf("requests served = %d, want only the read", served.Load())
	}
	done := make(chan error, 1)
	go func() { done <- do("PATCH", 10*time.Second) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the write went through a closed gate: %v", err)
	default:
	}
	g.Open()
	if err := <-done; err != nil || served.Load() != 2 {
		t.Fatalf("the held write once open = %v (served %d), want it sent", err, served.Load())
	}
	g.Close(errors.New("lifted"))
	if err := do("POST", 100*time.Millisecond); !errors.Is(err, ErrHeld) {
		t.Fatalf("a write after Close = %v, want held", err)
	}
	if g.IsOpen() {
		t.Error("IsOpen after Close")
	}
}
