package scopecheck

import "time"

// Timing says when Keep proves the scope again.
type Timing struct {
	// Period applies while the watch is open: it catches what no watch
	// sees (a webhook, an authorizer besides RBAC, a mutating policy).
	// Unwatched applies instead while the watch is not open (never
	// longer than Period). Each gets up to a tenth more, at random, so
	// that a fleet of sidecars does not probe in step.
	Period, Unwatched time.Duration
	// A change is checked once no other followed it for Settle (at most
	// MaxSettle after the first), plus up to Spread at random, and, if
	// that check found the scope in force, once more Confirm (plus up to
	// Spread) later. Settle outlasts the API server's own delay in
	// applying a policy change (it reloads its policies every second);
	// Confirm covers an API server other than the one that answered,
	// whose cache lags behind; Spread keeps a fleet from probing as one.
	Settle, MaxSettle, Spread, Confirm time.Duration
}

// DefaultPeriod and DefaultUnwatched are DefaultTiming's clocks: with the
// watch open, and without it.
const (
	DefaultPeriod    = 30 * time.Minute
	DefaultUnwatched = 2 * time.Minute
)

// DefaultTiming is Keep's timing unless flags say otherwise.
func DefaultTiming() Timing {
	return Timing{Period: DefaultPeriod, Unwatched: DefaultUnwatched,
		Settle: 2 * time.Second, MaxSettle: 10 * time.Second, Spread: 5 * time.Second, Confirm: 30 * time.Second}
}

// schedule decides when Keep checks next. Its methods are named for what
// happened; next says when to check. It reads no clock: the times come
// in, and rand (uniform in [0, d)) is given.
type schedule struct {
	t      Timing
	maxGap time.Duration
	rand   func(d time.Duration) time.Duration

	watching bool
	// last: when the last check began; held: it held the writes, and
	// the next check is gap after it.
	last time.Time
	held bool
	gap  time.Duration
	// clock: the next check by the clock (the period, or the backoff
	// of a hold); settle: of the first change not checked yet (first);
	// confirm: of the last change checked. Zero when none.
	clock, first, settle, confirm time.Time
	spread                        time.Duration
}

func newSchedule(t Timing, maxGap time.Duration, rand func(time.Duration) time.Duration, last time.Time, watching bool) *schedule {
	s := &schedule{t: t, maxGap: maxGap, rand: rand, watching: watching, last: last, gap: time.Second}
	s.clock = last.Add(s.period())
	return s
}

// period is the clock's, with its jitter.
func (s *schedule) period() time.Duration {
	p := s.t.Period
	if !s.watching {
		p = min(p, s.t.Unwatched)
	}
	return p + s.rand(p/10+1)
}

// next is when to check.
func (s *schedule) next() time.Time {
	n := s.clock
	for _, t := range []time.Time{s.settle, s.confirm} {
		if !t.IsZero() && t.Before(n) {
			n = t
		}
	}
	return n
}

// changed: the watch saw a change to what decides the scope at now.
func (s *schedule) changed(now time.Time) {
	if s.first.IsZero() {
		s.first, s.spread = now, s.rand(s.t.Spread+1)
	}
	s.settle = minTime(now.Add(s.t.Settle), s.first.Add(s.t.MaxSettle)).Add(s.spread)
}

// watch: at now, the watch is open (ok) or not, and its informers have
// been synced since synced. While it is not open, the short clock runs.
// Informers synced after the last check began may have missed a change
// between them: that counts as one.
func (s *schedule) watch(now time.Time, ok bool, synced time.Time) {
	if ok != s.watching {
		s.watching = ok
		switch {
		case s.held: // the backoff goes on
		case ok:
			s.clock = s.last.Add(s.period())
		default:
			s.clock = minTime(s.clock, now.Add(s.period()))
		}
	}
	if ok && synced.After(s.last) {
		s.changed(now)
	}
}

// checked: a check began at start and ended at end with v; until, when
// set, is when a hold on an unknown scope ends.
func (s *schedule) checked(start, end time.Time, v Verdict, until time.Time) {
	s.last = start
	// Only a check at or after its settle time covers a change: one
	// sooner may have reached the API server before the change did.
	settled := !s.settle.IsZero() && !start.Before(s.settle)
	if settled {
		s.first, s.settle = time.Time{}, time.Time{}
	}
	if !s.confirm.IsZero() && !start.Before(s.confirm) || !v.Write {
		s.confirm = time.Time{}
	}
	if !v.Write {
		wait := s.gap
		if !until.IsZero() {
			wait = min(wait, max(until.Sub(end), 0))
		}
		s.held, s.clock, s.gap = true, end.Add(wait), min(2*s.gap, s.maxGap)
		return
	}
	s.held, s.gap = false, time.Second
	s.clock = end.Add(s.period())
	if settled && v.Err == nil {
		s.confirm = end.Add(s.t.Confirm + s.rand(s.t.Spread+1))
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
