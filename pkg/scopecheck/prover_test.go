package scopecheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestAnUnknownScopeHoldsWritesForABoundedTime: an unknown scope holds
// every write until UnknownHold has passed since the first unknown in a
// row, then writes with a Warn, again every WarnEvery; an API error in between neither writes
// nor restarts the hold; proof or a probe let through ends the stretch,
// and a new unknown holds again.
func TestAnUnknownScopeHoldsWritesForABoundedTime(t *testing.T) {
	unknown := fmt.Errorf("%w: another policy", ErrUnknown)
	unscoped := fmt.Errorf("%w: let through", ErrUnscoped)
	down := errors.New("connection refused")
	type step struct {
		At          time.Duration
		Err         error
		Write, Warn bool
	}
	type verdict struct {
		At          time.Duration
		Write, Warn bool
	}
	steps := []step{
		{0, unknown, false, false},
		{30 * time.Second, unknown, false, false},
		{40 * time.Second, down, false, false},
		{time.Minute, unknown, true, true},
		{90 * time.Second, unknown, true, false},
		{100 * time.Second, down, false, false},
		{110 * time.Second, unknown, true, true}, // WarnEvery after the last
		{2 * time.Minute, nil, true, false},
		{3 * time.Minute, unknown, false, false},
		{3*time.Minute + 59*time.Second, unknown, false, false},
		{4 * time.Minute, unscoped, false, false},
		{4*time.Minute + time.Second, unknown, false, false},
		{5*time.Minute + time.Second, unknown, true, true},
	}
	start := time.Unix(1e9, 0)
	var now time.Time
	p := &Prover{UnknownHold: time.Minute, WarnEvery: 40 * time.Second, Now: func() time.Time { return now }}
	var want, got []verdict
	for _, s := range steps {
		want = append(want, verdict{s.At, s.Write, s.Warn})
		now = start.Add(s.At)
		v, until := p.judge(s.Err)
		got = append(got, verdict{s.At, v.Write, v.Warn})
		if !errors.Is(v.Err, s.Err) {
			t.Errorf("at %v: Verdict.Err = %v, want it to wrap %v", s.At, v.Err, s.Err)
		}
		if held := errors.Is(s.Err, ErrUnknown) && !v.Write; held != !until.IsZero() {
			t.Errorf("at %v: hold until %v for %+v", s.At, until, v)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
}

// TestWaitWritesOnceTheUnknownHoldEnds: with another policy refusing
// every probe of netready's pod policy for good, Wait returns, writing,
// once the hold is over, and reports one Warn naming that policy.
func TestWaitWritesOnceTheUnknownHoldEnds(t *testing.T) {
	freeze := func(k string) error {
		return byPolicy(k, "acme-kube-system-frozen", "pods in kube-system cannot be changed")
	}
	a := &answers{by: inForce(map[string]error{podLabel: freeze(podLabel), podAnnotation: freeze(podAnnotation), podCondition: freeze(podCondition)})}
	var verdicts []Verdict
	p := &Prover{Writer: a, Timeout: time.Second, MaxGap: time.Hour, UnknownHold: 1500 * time.Millisecond,
		Report: func(v Verdict) { verdicts = append(verdicts, v) }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.Wait(ctx, func(context.Context) (Self, error) { return me, nil }); err != nil {
		t.Fatalf("Wait = %v, want it to return once the hold is over", err)
	}
	last := verdicts[len(verdicts)-1]
	if !last.Write || !last.Warn || !errors.Is(last.Err, ErrUnknown) {
		t.Errorf("last Verdict = %+v, want a write with a Warn on an unknown scope", last)
	}
	for _, v := range verdicts[:len(verdicts)-1] {
		if v.Write || v.Warn {
			t.Errorf("Verdict within the hold = %+v, want every write held", v)
		}
	}
	if want := "ValidatingAdmissionPolicy 'acme-kube-system-frozen'"; last.Err == nil || !strings.Contains(last.Err.Error(), want) {
		t.Errorf("Verdict.Err = %v, want it to name %q", last.Err, want)
	}
}
