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
func run(t *testing.T, w Writer, period time.Duration) <-chan Verdict {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan Verdict, 100)
	done := make(chan struct{})
	p := &Prover{Writer: w, Timeout: time.Second, MaxGap: 50 * time.Millisecond, UnknownHold: time.Hour,
		Report: func(v Verdict) { reports <- v }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go func() {
		defer close(done)
		p.Keep(ctx, me, period)
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
	reports := run(t, w, 100*time.Millisecond)
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
