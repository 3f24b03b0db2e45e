package scopecheck

import (
	"context"
	"math/rand/v2"
	"time"
)

// Keep goes on proving the scope after Wait returned, when trig (nil: no
// watch) sees a change to what decides it, and by the clock, as t says
// (schedule). Each check's Verdict goes to Report; while one holds the
// writes, the checks back off from 1 s to MaxGap (waking when a hold on
// an unknown scope ends). The caller holds every write while the last
// Verdict says so. Keep returns when ctx ends.
func (p *Prover) Keep(ctx context.Context, self Self, t Timing, trig Trigger) {
	if trig == nil {
		trig = noTrigger{}
	}
	last := p.lastCheck
	if last.IsZero() { // Keep without Wait: the check just done is the caller's
		last = p.now()
	}
	ok, synced := trig.Watching()
	s := newSchedule(t, p.MaxGap, rand.N[time.Duration], last, ok)
	s.watch(p.now(), ok, synced)
	p.logWatch(ok, s)
	writing, proved := true, !p.acting
	timer := time.NewTimer(max(s.next().Sub(p.now()), 0))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-trig.Changed():
			s.changed(p.now())
		case <-trig.Health():
			ok, synced := trig.Watching()
			was := s.watching
			s.watch(p.now(), ok, synced)
			if ok != was {
				p.logWatch(ok, s)
			}
		case <-timer.C:
			if start := p.now(); !start.Before(s.next()) {
				writing, proved = p.keepCheck(ctx, self, s, start, writing, proved)
				if ctx.Err() != nil {
					return
				}
			}
		}
		timer.Reset(max(s.next().Sub(p.now()), 0))
	}
}

// keepCheck runs one check of Keep's, reports and logs it, and tells s.
func (p *Prover) keepCheck(ctx context.Context, self Self, s *schedule, start time.Time, writing, proved bool) (bool, bool) {
	p.lastCheck = start
	err := Check(ctx, p.Writer, self, p.Timeout)
	if ctx.Err() != nil {
		return writing, proved
	}
	v, until := p.judge(err)
	p.Report(v)
	s.checked(start, p.now(), v, until)
	switch {
	case !v.Write:
		if writing {
			p.Log.Warn("the sidecar's scope is no longer proved: holding every write until it is", "err", v.Err)
		}
		return false, proved
	case v.Err != nil:
		if v.Warn {
			p.Log.Warn("writing although the sidecar's scope cannot be told, after holding every write", "held", p.UnknownHold, "err", v.Err)
		}
		return true, false
	}
	if !proved || !writing {
		p.Log.Info("the admission policies that scope this sidecar are in force again", "pod", self.PodNamespace+"/"+self.PodName)
	}
	return true, true
}

// logWatch says how the scope is re-checked now.
func (p *Prover) logWatch(ok bool, s *schedule) {
	if ok {
		p.Log.Info("watching what decides the sidecar's scope: re-checking it after each change, and by the clock", "every", s.t.Period)
		return
	}
	p.Log.Warn("not watching what decides the sidecar's scope: re-checking it by the clock alone", "every", min(s.t.Period, s.t.Unwatched))
}

// noTrigger is no watch: Keep runs on the short clock.
type noTrigger struct{}

func (noTrigger) Changed() <-chan struct{}    { return nil }
func (noTrigger) Health() <-chan struct{}     { return nil }
func (noTrigger) Watching() (bool, time.Time) { return false, time.Time{} }
