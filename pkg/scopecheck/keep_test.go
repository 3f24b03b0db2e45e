package scopecheck

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
)

// switchable refuses every probe by its policy while inForce, and counts
// the checks (the pods/status probe comes first in each).
type switchable struct {
	mu      sync.Mutex
	inForce bool
	checks  int
}

func (s *switchable) answer(kind string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inForce {
		return nil
	}
	return byPolicy(kind, ownPolicy(kind), "no")
}

func (s *switchable) set(inForce bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inForce = inForce
}

func (s *switchable) PatchPodStatus(context.Context, string, string, types.PatchType, []byte) error {
	s.mu.Lock()
	s.checks++
	s.mu.Unlock()
	return s.answer(podLabel)
}

func (s *switchable) PatchNode(context.Context, string, types.PatchType, []byte, ...string) (*corev1.Node, error) {
	return &corev1.Node{}, s.answer(nodeLabel)
}

func (s *switchable) CreateEvent(context.Context, *eventsv1.Event) error {
	return s.answer(evReason)
}

// run starts a Prover's Keep and returns its Verdicts as they come.
func run(t *testing.T, w Writer, period time.Duration, changed chan struct{}) <-chan Verdict {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan Verdict, 100)
	done := make(chan struct{})
	p := &Prover{Writer: w, Timeout: time.Second, MaxGap: 50 * time.Millisecond, UnknownHold: time.Hour,
		Report: func(v Verdict) { reports <- v }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go func() {
		defer close(done)
		p.Keep(ctx, me, period, changed)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return reports
}

func next(t *testing.T, reports <-chan Verdict, within time.Duration) error {
	t.Helper()
	select {
	case v := <-reports:
		if v.Write != (v.Err == nil) {
			t.Errorf("Verdict %+v: writes on an error other than unknown past its hold", v)
		}
		return v.Err
	case <-time.After(within):
		t.Fatalf("no scope check within %v", within)
		return nil
	}
}

// TestKeepRechecksEveryPeriod: a scope lifted while the sidecar runs is
// reported within a period, naming the policy, and in force again once
// it is back, re-checked with backoff meanwhile.
func TestKeepRechecksEveryPeriod(t *testing.T) {
	w := &switchable{inForce: true}
	reports := run(t, w, 100*time.Millisecond, make(chan struct{}))
	if err := next(t, reports, 2*time.Second); err != nil {
		t.Fatalf("first periodic check = %v, want nil", err)
	}
	w.set(false)
	var err error
	for err == nil {
		err = next(t, reports, 2*time.Second)
	}
	if !errors.Is(err, ErrUnscoped) {
		t.Fatalf("check with the scope lifted = %v, want ErrUnscoped", err)
	}
	w.set(true)
	for err != nil {
		err = next(t, reports, 2*time.Second)
	}
}

// TestKeepRechecksWhenTheParamsChange: with a period far away, a change
// of the params is checked at once, and again shortly after, for the API
// server's own view of them catches up later.
func TestKeepRechecksWhenTheParamsChange(t *testing.T) {
	w := &switchable{inForce: true}
	changed := make(chan struct{}, 1)
	reports := run(t, w, time.Hour, changed)
	w.set(false)
	changed <- struct{}{}
	if err := next(t, reports, time.Second); !errors.Is(err, ErrUnscoped) {
		t.Fatalf("check after a params change = %v, want ErrUnscoped", err)
	}
	// In force again, then lifted late, as when the API server's informer
	// lags: a follow-up check still sees it.
	w.set(true)
	changed <- struct{}{}
	for next(t, reports, 2*time.Second) != nil {
	}
	w.set(false)
	if err := next(t, reports, 3*time.Second); !errors.Is(err, ErrUnscoped) {
		t.Fatalf("follow-up check after a params change = %v, want ErrUnscoped", err)
	}
}
