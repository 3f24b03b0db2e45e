package scopecheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// DefaultUnknownHold is how long the sidecar holds its writes while its
// scope cannot be told (ErrUnknown) before it writes on the evidence it
// has.
const DefaultUnknownHold = time.Minute

// Verdict is what one check means for the sidecar's writes.
type Verdict struct {
	// Err is nil when every policy is proved in force, else why not.
	Err error
	// Write says the sidecar may write: when Err is nil, and when it
	// wraps ErrUnknown and has for a whole UnknownHold.
	Write bool
	// Warn is set on the first Verdict of a stretch that writes with Err
	// set, and again every WarnEvery while it lasts: the sidecar says so
	// in a Warning Event.
	Warn bool
}

// Prover runs the scope check, first until the sidecar may write (Wait),
// then for as long as it runs (Keep), and tells Report each outcome.
// Wait and Keep run one after the other, never at once.
//
// A scope that cannot be told (another policy or webhook refuses every
// probe of a policy first) holds every write for UnknownHold, then lets
// them through, with /readyz, a Warning Event and the log naming the
// other check. That is safe enough, and holding for good is not: no probe
// was let through, so nothing shows the scope lifted; the other check
// already refuses those out-of-scope writes (labels, annotations, other
// conditions or Events) itself; the sidecar's writes are the ones it
// makes anyway, the policies being a second line against a sidecar gone
// wrong; and a hold for good would keep every gated pod of the node not
// ready because of a policy that is not netready's. A probe let through
// (ErrUnscoped) still holds every write until it is refused.
type Prover struct {
	Writer Writer
	// Timeout bounds each probe; MaxGap the backoff between failed
	// checks.
	Timeout, MaxGap time.Duration
	// UnknownHold: see Prover. Zero writes at the first unknown.
	UnknownHold time.Duration
	// WarnEvery repeats the Warn while the sidecar writes on an unknown
	// scope, so that its Event outlives the API server's --event-ttl
	// (zero: once).
	WarnEvery time.Duration
	Report    func(Verdict)
	Log       *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	// unknownSince starts the stretch of unknowns (zero when none);
	// acting: the sidecar writes on an unknown scope, Warn given at
	// warned.
	unknownSince, warned time.Time
	acting               bool
	// lastCheck is when the last check began.
	lastCheck time.Time
}

func (p *Prover) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// judge turns one check's error into a Verdict, and says until when a
// hold on an unknown scope lasts (zero when none is running).
func (p *Prover) judge(err error) (Verdict, time.Time) {
	now := p.now()
	switch {
	case err == nil:
		p.unknownSince, p.acting = time.Time{}, false
		return Verdict{Write: true}, time.Time{}
	case errors.Is(err, ErrUnknown):
		if p.unknownSince.IsZero() {
			p.unknownSince = now
		}
		if until := p.unknownSince.Add(p.UnknownHold); now.Before(until) {
			return Verdict{Err: fmt.Errorf("%w. Holding every write until %s (for at most %v), then writing on this evidence", err, until.UTC().Format(time.RFC3339), p.UnknownHold)}, until
		}
		v := Verdict{Err: err, Write: true, Warn: !p.acting || p.WarnEvery > 0 && now.Sub(p.warned) >= p.WarnEvery}
		if v.Warn {
			p.warned = now
		}
		p.acting = true
		return v, time.Time{}
	case errors.Is(err, ErrUnscoped):
		p.unknownSince, p.acting = time.Time{}, false
	}
	// The API server unreachable: the sidecar could not write anyway,
	// and a hold on an unknown scope goes on counting.
	return Verdict{Err: err}, time.Time{}
}

// Wait checks until the sidecar may write, backing off from 1 s to
// MaxGap (and waking when a hold on an unknown scope ends), reporting
// each check. self says which pod and node the sidecar is, and who; it is
// asked again after an error. Wait returns the Self it probed as, or
// ctx's error.
func (p *Prover) Wait(ctx context.Context, self func(context.Context) (Self, error)) (Self, error) {
	gap := time.Second
	var me *Self
	for {
		err := func() error {
			if me == nil {
				sctx, cancel := context.WithTimeout(ctx, p.Timeout)
				s, err := self(sctx)
				cancel()
				if err != nil {
					return fmt.Errorf("which pod and user is this sidecar: %w; pass --pod-namespace and --pod-name (deploy/ sets POD_NAMESPACE and POD_NAME)", err)
				}
				me = &s
			}
			p.lastCheck = p.now()
			return Check(ctx, p.Writer, *me, p.Timeout)
		}()
		v, until := p.judge(err)
		p.Report(v)
		switch {
		case v.Write && v.Err == nil:
			p.Log.Info("the admission policies that scope this sidecar are in force", "pod", me.PodNamespace+"/"+me.PodName)
			return *me, nil
		case v.Write:
			p.Log.Warn("writing although the sidecar's scope cannot be told, after holding every write", "held", p.UnknownHold, "err", v.Err)
			return *me, nil
		}
		wait := gap
		if !until.IsZero() {
			wait = min(wait, max(until.Sub(p.now()), 0))
		}
		p.Log.Warn("not writing anything until the sidecar's scope is enforced", "err", v.Err, "retryIn", wait)
		select {
		case <-ctx.Done():
			return Self{}, ctx.Err()
		case <-time.After(wait):
		}
		gap = min(2*gap, p.MaxGap)
	}
}
