// Package wait owns waiting for checks: probe once, and for what is not yet
// ready, sleep on the checks' event sources (netlink, inotify, nftables),
// with a slow safety re-check, or poll with a short capped backoff where no
// event exists, all bounded by the caller's context. A wake whose event
// shows the check met ends its wait without a probe.
package wait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/watch"
)

// Options tune the loop; zero values take the defaults.
type Options struct {
	// Safety is the first re-check interval of event-driven checks, for
	// events a stream might have lost; it doubles up to SafetyMax. A lost
	// event that a stream can tell of (ENOBUFS, an inotify overflow)
	// wakes its listeners at once; this net is for the ones it cannot.
	Safety, SafetyMax time.Duration
	// PollMin and PollMax bound the backoff of checks without events.
	PollMin, PollMax time.Duration
	// Logf, if set, receives notes such as a source that cannot be watched.
	Logf func(format string, args ...any)
	// Since is when the wait began, for the durations it reports; the
	// caller's own start, e.g. when ADD began. Default: now.
	Since time.Time
}

// DefaultPollMax is the backoff cap of polled checks. A change is seen
// within about one cap and one answer, so the cap sits a little under the
// 50 ms detection goal, leaving room for a storm's scheduling delay
// (docs/benchmarks.md).
const DefaultPollMax = 45 * time.Millisecond

// Defaults fills in unset options.
func (o *Options) Defaults() {
	if o.Safety == 0 {
		o.Safety = time.Second
	}
	if o.SafetyMax == 0 {
		// Each re-check of a rule check reads its chain, which in a
		// storm holds every other pod's rule: backing off keeps a storm
		// of waiting ADDs from spending its CPU on re-checks
		// (docs/benchmarks.md).
		o.SafetyMax = max(o.Safety, 4*time.Second)
	}
	if o.PollMin == 0 {
		o.PollMin = 2 * time.Millisecond
	}
	if o.PollMax == 0 {
		o.PollMax = DefaultPollMax
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Since.IsZero() {
		o.Since = time.Now()
	}
}

// Result is the outcome of one check.
type Result struct {
	Check  checks.Check
	Ready  bool
	Waited time.Duration
	// Why the check is not ready, from its last probe.
	Why string
	// shown: a wake's event showed it met, with no probe of its own.
	shown bool
}

// Outcome is the outcome of one wait.
type Outcome struct {
	Results []Result
	// Waited is from Options.Since to when the last check was ready or the
	// wait ended.
	Waited time.Duration
}

// Ready reports whether every check is ready.
func (o Outcome) Ready() bool {
	for _, r := range o.Results {
		if !r.Ready {
			return false
		}
	}
	return true
}

// CheckResults is the outcome as a marker records it.
func (o Outcome) CheckResults() []marker.CheckResult {
	out := make([]marker.CheckResult, 0, len(o.Results))
	for _, r := range o.Results {
		cr := marker.CheckResult{Kind: r.Check.Kind(), Target: r.Check.Target(), Ready: r.Ready, Why: r.Why}
		if r.Ready {
			cr.WaitedMs = r.Waited.Milliseconds()
		}
		out = append(out, cr)
	}
	return out
}

// Unmet lists the checks that are not ready, each with its target and why.
func (o Outcome) Unmet() string {
	var parts []string
	for _, r := range o.Results {
		if r.Ready {
			continue
		}
		s := checks.Describe(r.Check)
		if r.Why != "" {
			s += " (" + r.Why + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// NeverError reports a check that can never succeed.
type NeverError struct {
	Check checks.Check
	Err   error
}

func (e *NeverError) Error() string {
	return fmt.Sprintf("check %s: %v", checks.Describe(e.Check), e.Err)
}

func (e *NeverError) Unwrap() error { return e.Err }

// deadlineGrace is how long Until waits, once ctx has ended, for probes to
// return their answers before it reports them as still unmet.
const deadlineGrace = 50 * time.Millisecond

// Until waits until every check is ready or ctx ends, and returns within
// deadlineGrace of ctx's end whatever a probe is doing. It returns a
// *NeverError as soon as one check can never succeed (its probe returned
// an error wrapping checks.ErrNever); other probe errors are transient and
// retried. Otherwise it returns the outcome, whose unmet checks say why.
//
// Ready is reported only once every check was probed again after the last
// one was met: a check met early can regress while a slower one waits (an
// agent re-creating its table), and a wake that showed a check met can be
// followed by one that undoes it. A check found unmet then resumes the
// wait.
func Until(ctx context.Context, cs []checks.Check, opts Options) (Outcome, error) {
	opts.Defaults()
	pause := opts.PollMin
	for {
		out, err := waitAll(ctx, cs, opts)
		if err != nil || !out.Ready() {
			return out, err
		}
		i, why, err := confirm(ctx, out.Results)
		if i < 0 {
			return out, nil
		}
		out.Results[i].Ready, out.Results[i].Why, out.Results[i].Waited = false, why, 0
		out.Waited = time.Since(opts.Since)
		if err != nil {
			return out, &NeverError{Check: cs[i], Err: err}
		}
		if ctx.Err() != nil {
			return out, nil
		}
		opts.Logf("check %s was met but no longer holds (%s); waiting again", checks.Describe(cs[i]), why)
		// A check that keeps flapping must not spin.
		select {
		case <-ctx.Done():
			return out, nil
		case <-time.After(pause):
		}
		pause = min(2*pause, opts.PollMax)
	}
}

// confirm probes every met check once more, but the one met last by a
// probe of its own (nothing can have happened to it since). It returns the
// index of the first check that no longer holds, with why, or -1; the
// error is set when that check can never succeed.
func confirm(ctx context.Context, rs []Result) (int, string, error) {
	last := -1
	for i, r := range rs {
		if last < 0 || r.Waited > rs[last].Waited {
			last = i
		}
	}
	for i, r := range rs {
		if i == last && !r.shown {
			continue
		}
		ready, why, err := r.Check.Probe(ctx)
		switch {
		case errors.Is(err, checks.ErrNever):
			return i, err.Error(), err
		case err != nil:
			return i, err.Error(), nil
		case !ready:
			return i, why, nil
		}
	}
	return -1, "", nil
}

// waitAll is one wait of Until, without the confirmation.
func waitAll(ctx context.Context, cs []checks.Check, opts Options) (Outcome, error) {
	start := opts.Since
	out := Outcome{Results: make([]Result, len(cs))}
	if len(cs) == 0 {
		out.Waited = time.Since(start)
		return out, nil
	}
	// Checks that ask only the kernel are probed once here, in turn: an
	// attachment that is already programmed then costs no goroutine,
	// stream or timer, which is most of an ADD's own time.
	reported := make([]bool, len(cs))
	probed := make([]*string, len(cs)) // why a check probed here is unmet
	remaining := len(cs)
	for i, c := range cs {
		out.Results[i] = Result{Check: c}
	}
	for i, c := range cs {
		if !checks.KernelOnly(c) {
			continue
		}
		ready, why, err := c.Probe(ctx)
		switch {
		case errors.Is(err, checks.ErrNever):
			out.Results[i].Why = err.Error()
			out.Waited = time.Since(start)
			return out, &NeverError{Check: c, Err: err}
		case err != nil:
			why = err.Error()
		case ready:
			out.Results[i].Ready, out.Results[i].Waited = true, time.Since(start)
			reported[i] = true
			remaining--
			continue
		}
		probed[i] = &why
	}
	if remaining == 0 {
		out.Waited = time.Since(start)
		return out, nil
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Streams open only for checks whose first probe says not ready.
	hub := watch.NewHub(ctx)
	defer hub.Close()

	type done struct {
		i   int
		res Result
		err error
	}
	results := make(chan done, len(cs))
	last := make([]atomic.Pointer[string], len(cs))
	for i, c := range cs {
		if reported[i] {
			continue
		}
		go func() {
			res, err := waitOne(ctx, hub, c, start, opts, &last[i], probed[i])
			results <- done{i: i, res: res, err: err}
		}()
	}
	var grace <-chan time.Time
	for remaining > 0 {
		select {
		case d := <-results:
			remaining--
			reported[d.i] = true
			out.Results[d.i] = d.res
			if d.err != nil {
				cancel()
				out.Waited = time.Since(start)
				return out, &NeverError{Check: cs[d.i], Err: d.err}
			}
		case <-ctx.Done():
			if grace == nil {
				grace = time.After(deadlineGrace)
			}
		case <-grace:
			for i := range cs {
				if !reported[i] {
					why := "still probing at the deadline"
					if w := last[i].Load(); w != nil {
						why = *w + "; still probing at the deadline"
					}
					out.Results[i].Why = why
				}
			}
			remaining = 0
		}
	}
	out.Waited = time.Since(start)
	return out, nil
}

// waitOne runs one check until it is ready, can never be, or ctx ends. It
// stores each probe's reason in last, for a deadline that interrupts it.
// probed is why the check was unmet when Until probed it, or nil: such a
// check is not probed again before its streams are open.
func waitOne(ctx context.Context, hub *watch.Hub, c checks.Check, start time.Time, opts Options, last *atomic.Pointer[string], probed *string) (Result, error) {
	res := Result{Check: c}
	met := func() { res.Ready, res.Why, res.Waited = true, "", time.Since(start) }
	probe := func() (bool, error) {
		ready, why, err := c.Probe(ctx)
		if errors.Is(err, checks.ErrNever) {
			res.Why = err.Error()
			return false, err
		}
		if err != nil {
			// Transient (a socket error, out of file descriptors): say
			// so and probe again.
			ready, why = false, err.Error()
		}
		// A probe the deadline cut short says only that; the one before
		// it says why the check is unmet. A socket deadline can fire a
		// moment before ctx's own timer, so a passed deadline counts too.
		if !ready && deadlinePassed(ctx) && res.Why != "" {
			return false, nil
		}
		res.Why = why
		last.Store(&why)
		if ready {
			met()
		}
		return ready, nil
	}
	if probed != nil {
		res.Why = *probed
		last.Store(probed)
		if ctx.Err() != nil {
			return res, nil
		}
	} else if ready, err := probe(); ready || err != nil || ctx.Err() != nil {
		return res, err
	}

	wake := make(chan watch.Wake, 1)
	watched := 0
	for _, src := range c.Sources() {
		if err := hub.SubscribeTo(src, wake); err != nil {
			opts.Logf("check %s: %v; polling instead", checks.Describe(c), err)
			continue
		}
		watched++
	}
	// With every stream open, the timer is only a safety net for lost
	// events; otherwise poll with a short capped backoff.
	interval, maxInterval := opts.Safety, opts.SafetyMax
	if watched < len(c.Sources()) || watched == 0 {
		interval, maxInterval = opts.PollMin, opts.PollMax
	}
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		// Probe right after subscribing: a change that came before the
		// stream opened is seen now, one that comes after wakes us.
		if ready, err := probe(); ready || err != nil || ctx.Err() != nil {
			return res, err
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			return res, nil
		case w := <-wake:
			if w.Shows {
				// The event itself shows the check met; a probe would
				// only read it back.
				met()
				res.shown = true
				return res, nil
			}
		case <-timer.C:
			interval = min(interval*2, maxInterval)
		}
	}
}

// deadlinePassed reports whether ctx is done or its deadline has passed,
// even if its timer has not fired yet.
func deadlinePassed(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}
