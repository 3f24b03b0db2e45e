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

// run starts a Prover's Keep with no watch, and returns its Verdicts as
// they come.
func run(t *testing.T, w Writer, period time.Duration) <-chan Verdict {
	t.Helper()
	return runWatched(t, w, Timing{Period: time.Hour, Unwatched: period}, nil)
}

// runWatched starts a Prover's Keep with timing and trig, and returns its
// Verdicts as they come.
func runWatched(t *testing.T, w Writer, timing Timing, trig Trigger) <-chan Verdict {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan Verdict, 100)
	done := make(chan struct{})
	p := &Prover{Writer: w, Timeout: time.Second, MaxGap: 50 * time.Millisecond, UnknownHold: time.Hour,
		Report: func(v Verdict) { reports <- v }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go func() {
		defer close(done)
		p.Keep(ctx, me, timing, trig)
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

// trigger is a Trigger the test drives.
type trigger struct {
	changed, health chan struct{}
	mu              sync.Mutex
	ok              bool
	synced          time.Time
}

func newTrigger(ok bool) *trigger {
	return &trigger{changed: make(chan struct{}, 1), health: make(chan struct{}, 1), ok: ok}
}

func (g *trigger) Changed() <-chan struct{} { return g.changed }
func (g *trigger) Health() <-chan struct{}  { return g.health }
func (g *trigger) Watching() (bool, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ok, g.synced
}

func (g *trigger) set(ok bool) {
	g.mu.Lock()
	g.ok = ok
	g.mu.Unlock()
	g.health <- struct{}{}
}

// quick is a timing whose clock never fires in a test, and whose change
// checks come within 100 ms.
var quick = Timing{Period: time.Hour, Unwatched: time.Hour, Settle: 20 * time.Millisecond, MaxSettle: 50 * time.Millisecond,
	Spread: 20 * time.Millisecond, Confirm: 100 * time.Millisecond}

// TestKeepChecksSoonAfterAChange: with the clock an hour away, a change
// the watch saw is checked at once (after it settles), once more to
// confirm, and then not again; a scope lifted is caught that way.
func TestKeepChecksSoonAfterAChange(t *testing.T) {
	w := &switchable{inForce: true}
	g := newTrigger(true)
	reports := runWatched(t, w, quick, g)
	select {
	case v := <-reports:
		t.Fatalf("a check (%+v) with no change and the clock an hour away", v)
	case <-time.After(300 * time.Millisecond):
	}
	g.changed <- struct{}{}
	for i, what := range []string{"the change's check", "its confirmation"} {
		if err := next(t, reports, 2*time.Second); err != nil {
			t.Fatalf("%s (%d) = %v, want nil", what, i, err)
		}
	}
	select {
	case v := <-reports:
		t.Fatalf("a third check (%+v) after one change", v)
	case <-time.After(400 * time.Millisecond):
	}
	w.set(false)
	g.changed <- struct{}{}
	if err := next(t, reports, 2*time.Second); !errors.Is(err, ErrUnscoped) {
		t.Fatalf("check after the scope was lifted = %v, want ErrUnscoped", err)
	}
}

// TestKeepFallsBackToTheShortClockWhenTheWatchCloses: a watch that stops
// being open brings the short clock back, at once; one open again
// sends it back to the long one.
func TestKeepFallsBackToTheShortClockWhenTheWatchCloses(t *testing.T) {
	w := &switchable{inForce: true}
	g := newTrigger(true)
	timing := quick
	timing.Unwatched = 100 * time.Millisecond
	reports := runWatched(t, w, timing, g)
	select {
	case v := <-reports:
		t.Fatalf("a check (%+v) while watching, with the clock an hour away", v)
	case <-time.After(300 * time.Millisecond):
	}
	g.set(false)
	for range 2 {
		if err := next(t, reports, 2*time.Second); err != nil {
			t.Fatalf("check on the short clock = %v, want nil", err)
		}
	}
	g.set(true)
	for len(reports) > 0 {
		<-reports
	}
	select {
	case v := <-reports:
		t.Fatalf("a check (%+v) on the short clock once the watch was open again", v)
	case <-time.After(400 * time.Millisecond):
	}
}
