package scopecheck

import (
	"context"
	"math/rand/v2"
	"time"
)

// Keep goes on proving the scope after Wait returned: every period (with
// up to a tenth more, so that a fleet of sidecars does not probe in
// step). Each check's Verdict goes to Report; while one holds the
// writes, the checks back off from 1 s to MaxGap (waking when a hold on
// an unknown scope ends). The caller holds every write while the last
// Verdict says so. Keep returns when ctx ends.
func (p *Prover) Keep(ctx context.Context, self Self, period time.Duration) {
	gap := time.Second
	writing, proved := true, !p.acting
	next := period + rand.N(period/10+1)
	timer := time.NewTimer(next)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		err := Check(ctx, p.Writer, self, p.Timeout)
		if ctx.Err() != nil {
			return
		}
		v, until := p.judge(err)
		p.Report(v)
		switch {
		case !v.Write:
			if writing {
				p.Log.Warn("the sidecar's scope is no longer proved: holding every write until it is", "err", v.Err)
			}
			writing = false
			next, gap = gap, min(2*gap, p.MaxGap)
			if !until.IsZero() {
				next = min(next, max(until.Sub(p.now()), 0))
			}
		case v.Err != nil:
			if v.Warn {
				p.Log.Warn("writing although the sidecar's scope cannot be told, after holding every write", "held", p.UnknownHold, "err", v.Err)
			}
			writing, proved, gap = true, false, time.Second
			next = period + rand.N(period/10+1)
		default:
			if !proved || !writing {
				p.Log.Info("the admission policies that scope this sidecar are in force again", "pod", self.PodNamespace+"/"+self.PodName)
			}
			writing, proved, gap = true, true, time.Second
			next = period + rand.N(period/10+1)
		}
		timer.Reset(next)
	}
}
