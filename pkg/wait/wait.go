// Package wait owns waiting for checks: probe once, and for what is not yet
// ready, sleep on the checks' event sources (netlink, inotify, nftables),
// with a slow safety re-check, or poll with a short capped backoff where no
// event exists, all bounded by the caller's context.
package wait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/watch"
)

// Options tune the loop; zero values take the defaults.
type Options struct {
	// Safety is the re-check interval of event-driven checks, for events
	// a stream might have lost.
	Safety time.Duration
	// PollMin and PollMax bound the backoff of checks without events.
	PollMin, PollMax time.Duration
	// Logf, if set, receives notes such as a source that cannot be watched.
	Logf func(format string, args ...any)
}

// Defaults fills in unset options.
func (o *Options) Defaults() {
	if o.Safety == 0 {
		o.Safety = time.Second
	}
	if o.PollMin == 0 {
		o.PollMin = 2 * time.Millisecond
	}
	if o.PollMax == 0 {
		o.PollMax = 50 * time.Millisecond
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Result is the outcome of one check.
type Result struct {
	Check  checks.Check
	Ready  bool
	Waited time.Duration
	// Why the check is not ready, from its last probe.
	Why string
}

// Outcome is the outcome of one wait.
type Outcome struct {
	Results []Result
	Waited  time.Duration
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

// Until waits until every check is ready or ctx ends. It returns a
// *NeverError as soon as one check can never succeed; otherwise the outcome,
// whose unmet checks say why.
func Until(ctx context.Context, cs []checks.Check, opts Options) (Outcome, error) {
	opts.Defaults()
	start := time.Now()
	out := Outcome{Results: make([]Result, len(cs))}
	var pending []int
	// Fast path: most attachments are programmed by the time the chain ends,
	// and then no stream is opened at all.
	for i, c := range cs {
		ready, why, err := c.Probe(ctx)
		if err != nil {
			return out, &NeverError{Check: c, Err: err}
		}
		out.Results[i] = Result{Check: c, Ready: ready, Why: why, Waited: time.Since(start)}
		if !ready {
			pending = append(pending, i)
		}
	}
	if len(pending) == 0 || ctx.Err() != nil {
		out.Waited = time.Since(start)
		return out, nil
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hub := watch.NewHub(ctx)
	defer hub.Close()

	type done struct {
		i   int
		res Result
		err error
	}
	results := make(chan done, len(pending))
	for _, i := range pending {
		go func(i int) {
			res, err := waitOne(ctx, hub, cs[i], start, opts)
			results <- done{i: i, res: res, err: err}
		}(i)
	}
	var never error
	for range pending {
		d := <-results
		out.Results[d.i] = d.res
		if d.err != nil && never == nil {
			never = &NeverError{Check: cs[d.i], Err: d.err}
			cancel()
		}
	}
	out.Waited = time.Since(start)
	return out, never
}

// waitOne runs one check until it is ready, can never be, or ctx ends.
func waitOne(ctx context.Context, hub *watch.Hub, c checks.Check, start time.Time, opts Options) (Result, error) {
	wake := make(chan struct{}, 1)
	watched := 0
	for _, src := range c.Sources() {
		if err := hub.SubscribeTo(src, wake); err != nil {
			opts.Logf("check %s: %v; re-checking by polling", checks.Describe(c), err)
			continue
		}
		watched++
	}
	// Without a single working stream, poll with backoff; with streams, the
	// safety timer only covers lost events.
	interval, maxInterval := opts.Safety, opts.Safety
	if watched == 0 || watched < len(c.Sources()) {
		interval, maxInterval = opts.PollMin, opts.PollMax
	}
	timer := time.NewTimer(interval)
	defer timer.Stop()
	res := Result{Check: c}
	for {
		ready, why, err := c.Probe(ctx)
		if err != nil {
			res.Why = err.Error()
			return res, err
		}
		res.Why = why
		if ready {
			res.Ready, res.Why, res.Waited = true, "", time.Since(start)
			return res, nil
		}
		if ctx.Err() != nil {
			return res, nil
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			// The last probe may have raced the deadline; its answer stands.
			return res, nil
		case <-wake:
		case <-timer.C:
			interval = min(interval*2, maxInterval)
		}
	}
}

// IsNever reports whether err says a check can never succeed.
func IsNever(err error) bool {
	var ne *NeverError
	return errors.As(err, &ne)
}
