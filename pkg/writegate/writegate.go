// Package writegate holds netready-sidecar's writes to the API server
// while the admission policies that scope them are not known to be in
// force (pkg/scopecheck). It sits in the HTTP transport that every one of
// the sidecar's clients shares, so the condition controller, the pool
// watch, the Event recorder and any later part pause alike, without each
// having to ask.
package writegate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Gate lets writes through while open. The zero value is not usable; New
// returns a closed Gate.
type Gate struct {
	mu sync.Mutex
	// opened is closed while the gate is open, so that held writes can
	// wait on it; a new one is made each time the gate closes.
	opened chan struct{}
	isOpen bool
	why    error
	// maxHold bounds a hold for a request whose context has no deadline.
	maxHold time.Duration
}

// ErrHeld is wrapped by the error a held write fails with.
var ErrHeld = errors.New("netready-sidecar holds its writes until the admission policies that scope it are in force again")

// New returns a closed Gate, why being the reason; a write whose request
// has no deadline is held at most maxHold.
func New(why error, maxHold time.Duration) *Gate {
	return &Gate{opened: make(chan struct{}), why: why, maxHold: maxHold}
}

// Open lets writes through, held ones included.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.isOpen {
		g.isOpen, g.why = true, nil
		close(g.opened)
	}
}

// Close holds every write from now on; why says what is wrong.
func (g *Gate) Close(why error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.isOpen {
		g.isOpen = false
		g.opened = make(chan struct{})
	}
	g.why = why
}

// IsOpen reports whether writes go through.
func (g *Gate) IsOpen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.isOpen
}

// wait returns nil once the gate is open, or an error wrapping ErrHeld
// when ctx ends or maxHold passes first.
func (g *Gate) wait(ctx context.Context) error {
	g.mu.Lock()
	opened, why := g.opened, g.why
	g.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.maxHold)
		defer cancel()
	}
	select {
	case <-opened:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w (%v): %w", ErrHeld, why, ctx.Err())
	}
}

// Wrap returns rt behind the gate, for rest.Config.Wrap.
func (g *Gate) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{g: g, next: rt}
}

type roundTripper struct {
	g    *Gate
	next http.RoundTripper
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if IsWrite(req) {
		if err := r.g.wait(req.Context()); err != nil {
			return nil, err
		}
	}
	return r.next.RoundTrip(req)
}

// IsWrite reports whether req changes anything on the API server. Reads
// and watches are not held: the sidecar keeps its caches warm while it
// waits. Neither are dry runs (the scope check's own probes) nor a
// SelfSubjectReview, which only asks who the client is.
func IsWrite(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	if req.URL.Query().Get("dryRun") == "All" {
		return false
	}
	return !(req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/selfsubjectreviews"))
}
