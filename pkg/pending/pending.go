// Package pending owns going on with an attachment's checks after ADD gave
// up waiting (onTimeout "proceed") or left a part to the sidecar (with
// Cilium, crossNode's published CiliumEndpoint): rebuilding the checks
// from its pending marker, waiting on them in rounds so that progress can
// be shown, backing off once the attachment has been pending for long, and
// rewriting the marker as ready once they hold. It never gives up on its
// own.
package pending

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/wait"
)

// Schedule paces Recheck.
type Schedule struct {
	// Round is how long one event-driven round waits.
	Round time.Duration
	// Patience is how long after ADD rounds follow each other at once.
	// After it, Recheck pauses between rounds, doubling from Round up to
	// MaxGap, so that an attachment that never gets programmed costs
	// little.
	Patience time.Duration
	MaxGap   time.Duration
}

// Gap is the pause before round n (from 0) that starts at t, for a marker
// created at created.
func (s Schedule) Gap(created, t time.Time, n int) time.Duration {
	if t.Sub(created) < s.Patience {
		return 0
	}
	gap := s.Round
	for i := 0; i < n && gap < s.MaxGap; i++ {
		gap *= 2
	}
	return min(gap, s.MaxGap)
}

// Inputs are what Recheck reads besides the marker: the marker store,
// and the API server's CiliumEndpoints for a marker whose cross-node part
// follows Cilium (nil: it stays unmet, saying so).
type Inputs struct {
	Store           marker.Store
	CiliumEndpoints CiliumEndpoints
	// Off, when set and true, says netready is switched off (package
	// offswitch): the re-check then reads no CiliumEndpoint, so that an
	// incident costs the API server nothing more.
	Off func() bool
}

// writeRetryMin is the first pause after a marker write that failed for a
// reason that passes (ENOSPC on /run, EMFILE); it doubles up to MaxGap.
const writeRetryMin = time.Second

// Recheck waits on m's checks until they all hold, and then, when m
// carries a crossNode, until the other nodes have learned the pod (or are
// left out as stalled), then writes m as ready and returns it. After a
// round that did not finish, progress gets m with the checks' current
// reasons. It stops with ctx, or with an error when a
// check can never succeed (the pod or its netns is gone), the marker was
// removed (DEL) or rewritten (a new ADD). A write that fails otherwise is
// retried with backoff: giving up would leave the pod not ready until the
// sidecar restarts.
func Recheck(ctx context.Context, in Inputs, m *marker.Marker, s Schedule, progress func(*marker.Marker)) (*marker.Marker, error) {
	store := in.Store
	if m.Pending == nil {
		return nil, errors.New("marker is not pending")
	}
	att, err := m.Attachment()
	if err != nil {
		return nil, err
	}
	env := checks.NewEnv(m.NetNS)
	defer env.Close()
	cs, err := checks.Build(m.Pending.Checks, att, env)
	if err != nil {
		return nil, err
	}
	xn, err := crossNodeOf(in, m, att)
	if err != nil {
		// Never re-checked, so the pod stays not ready: its condition,
		// not only the log, must say why.
		bad := *m
		bad.Checks = append(slices.Clone(m.Checks), marker.CheckResult{Kind: checks.KindOVNCrossNode, Target: "the pending marker's crossNode",
			Why: err.Error() + ": the sidecar cannot re-check this attachment; delete the pod to start it again"})
		progress(&bad)
		return nil, err
	}
	late := 0
	writeRetry := writeRetryMin
	for {
		if gap := s.Gap(m.CreatedAt.Time, time.Now(), late); gap > 0 {
			late++
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(gap):
			}
		}
		roundCtx, cancel := context.WithTimeout(ctx, s.Round)
		out, err := wait.Until(roundCtx, cs, wait.Options{Since: m.CreatedAt.Time})
		cancel()
		if err != nil {
			return nil, err
		}
		results, waited, ready := out.CheckResults(), out.Waited, out.Ready()
		if ready && xn != nil {
			// This node holds; now the others, as ADD would have waited.
			r := xn.wait(ctx, s.Round, m.CreatedAt.Time)
			results, ready = append(results, r), r.Ready
			waited = time.Since(m.CreatedAt.Time)
		}
		next := marker.New(att, results, waited, m.CreatedAt.Time)
		if !ready {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			next.State, next.ReadyAt, next.Pending = marker.StatePending, nil, m.Pending
			progress(next)
			continue
		}
		// DEL may have removed the marker meanwhile, or a new ADD of the
		// attachment written another: never undo either.
		err = store.Replace(next, func(old *marker.Marker) bool {
			return old.State == marker.StatePending && old.CreatedAt.Equal(m.CreatedAt.Time)
		})
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("marker removed while its checks ran: %w", err)
		case errors.Is(err, atomicfile.ErrChanged):
			return nil, fmt.Errorf("marker rewritten while its checks ran: %w", err)
		case err != nil:
			// The checks hold but the marker cannot say so yet: stay
			// pending, say why, and look again after a pause.
			next.State, next.ReadyAt, next.Pending = marker.StatePending, nil, m.Pending
			next.Checks = append(next.Checks, marker.CheckResult{Kind: "marker", Target: "write",
				Why: fmt.Sprintf("the checks hold, but the ready marker cannot be written (%v); retrying in %s", err, writeRetry)})
			progress(next)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(writeRetry):
			}
			writeRetry = min(2*writeRetry, max(s.MaxGap, writeRetryMin))
			continue
		}
		return next, nil
	}
}
