package checks

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/netready/netready/pkg/ovsdb"
)

// The barrier is paced cluster-wide. A raise of NB_Global.nb_cfg serves
// every port claim committed before it, and costs a Chassis_Private write
// on every chassis, so a waiter that finds a raise made a moment ago waits
// for the next one, or makes it once crossNode.raiseInterval has passed:
// the NB sees at most about one raise per interval, whatever the number of
// nodes and pods. netready stamps each raise in NB_Global.external_ids
// (raisedAtKey, ms on the raiser's clock) in the same transaction. The
// stamp only paces. What serves a pod is nb_cfg above the value n read
// once its claim was in the SB: only a raise committed after that read can
// make it, so clocks (skewed between nodes) change the rate, never what a
// chassis at n+1 proves.

// raisedAtKey is netready's key in NB_Global.external_ids.
const raisedAtKey = "netready-raised-at"

// nbGlobal is what the pacing reads of NB_Global.
type nbGlobal struct {
	cfg int64
	// raisedAt is the stamp of netready's latest raise; zero when none.
	raisedAt time.Time
}

// pacing is one decision of a waiter.
type pacing struct {
	// join: nb_cfg is past the waiter's value, so a raise made after its
	// claim was seen serves it.
	join bool
	// raise: raise now, guarded by the waiter's value.
	raise bool
	// wait, when neither: until then, or until NB_Global changes.
	wait time.Duration
}

// pace decides for a waiter that read nb_cfg n at seen, once its claim was
// in the SB; g is NB_Global now. A raise stamped less than interval ago
// defers this one until the interval has passed since that raise, but
// never past seen+interval, whatever the stamp says: the clock of a raiser
// that runs ahead of this node's must not hold its pods longer.
func pace(n int64, g nbGlobal, seen, now time.Time, interval time.Duration) pacing {
	if g.cfg > n {
		return pacing{join: true}
	}
	due := seen
	if !g.raisedAt.IsZero() {
		due = g.raisedAt.Add(interval)
		if limit := seen.Add(interval); due.After(limit) {
			due = limit
		}
	}
	if !now.Before(due) {
		return pacing{raise: true}
	}
	return pacing{wait: due.Sub(now)}
}

// barrier returns the nb_cfg value that a chassis must reach to have this
// pod's claim and every NB change before it: n+1, n being NB_Global.nb_cfg
// read once the claim was in the SB. It raises nb_cfg to n+1 itself
// (raised) unless another client raises it first, paced by interval;
// parallel waiters on any node share a raise. It ends by ctx.
func barrier(ctx context.Context, socket string, interval time.Duration) (target int64, raised bool, paced time.Duration, err error) {
	g, err := readNBGlobalUntil(ctx, socket)
	if err != nil {
		return 0, false, 0, err
	}
	n, seen := g.cfg, time.Now()
	paceErr := func() error {
		return fmt.Errorf("before netready's barrier: waited %s to join or make the next raise of NB_Global.nb_cfg (crossNode.raiseInterval %s)",
			time.Since(seen).Round(time.Millisecond), interval)
	}
	// The NB_Global monitor, if any, ends with the pacing.
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	var updates <-chan struct{}
	monitored := false
	for {
		p := pace(n, g, seen, time.Now(), interval)
		switch {
		case p.join:
			return n + 1, false, time.Since(seen), nil
		case p.raise:
			ok, err := raiseFrom(ctx, socket, n)
			if err == nil && ok {
				return n + 1, true, time.Since(seen), nil
			}
			if err != nil && !sleepCtx(ctx, crossNodePoll) {
				return 0, false, 0, fmt.Errorf("before netready's barrier: %w", err)
			}
			// A failed guard: someone raised since the read.
		case !monitored:
			// Watch NB_Global before the read that decides to wait, so
			// that no raise after it slips by.
			monitored = true
			if u, err := ovsdb.Monitor(mctx, socket, "OVN_Northbound", "NB_Global", []string{"nb_cfg", "external_ids"}); err == nil {
				updates = u
			}
		default:
			wait := p.wait
			if updates == nil {
				wait = min(wait, crossNodePoll)
			}
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return 0, false, 0, paceErr()
			case _, ok := <-updates:
				if !ok {
					updates = nil
				}
			case <-timer.C:
			}
			timer.Stop()
		}
		if g, err = readNBGlobalUntil(ctx, socket); err != nil {
			if p.wait > 0 {
				// The deadline came while pacing: that is the reason.
				err = paceErr()
			}
			return 0, false, 0, err
		}
		// nb_cfg only grows, unless the NB was reset (restored, or
		// recreated): the chassis may then still report the old, higher
		// values, which prove nothing of this pod. Say so rather than
		// take them.
		if g.cfg < n {
			return 0, false, 0, fmt.Errorf("before netready's barrier: NB_Global.nb_cfg went back from %d to %d (the NB was reset?); the chassis' nb_cfg cannot be compared with it", n, g.cfg)
		}
	}
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// readNBGlobalUntil reads NB_Global, retrying an unreachable database until
// ctx ends.
func readNBGlobalUntil(ctx context.Context, socket string) (nbGlobal, error) {
	for {
		g, err := readNBGlobal(ctx, socket)
		if err == nil {
			return g, nil
		}
		if !sleepCtx(ctx, crossNodePoll) {
			return nbGlobal{}, fmt.Errorf("before netready's barrier: %w", err)
		}
	}
}

func readNBGlobal(ctx context.Context, socket string) (nbGlobal, error) {
	rows, err := ovsdb.Select(ctx, socket, "OVN_Northbound", "NB_Global", []any{}, []string{"nb_cfg", "external_ids"})
	if err != nil {
		return nbGlobal{}, fmt.Errorf("cannot read NB_Global.nb_cfg: %w", err)
	}
	if len(rows) != 1 {
		return nbGlobal{}, fmt.Errorf("cannot read NB_Global.nb_cfg: the NB at %s has %d NB_Global rows, not 1", socket, len(rows))
	}
	cfg, ok := ovsdb.Int(rows[0]["nb_cfg"])
	if !ok {
		return nbGlobal{}, fmt.Errorf("cannot read NB_Global.nb_cfg: %s", rows[0]["nb_cfg"])
	}
	g := nbGlobal{cfg: cfg}
	if v, ok := ovsdb.MapValue(rows[0]["external_ids"], raisedAtKey); ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			g.raisedAt = time.UnixMilli(ms)
		}
	}
	return g, nil
}

// raiseFrom raises nb_cfg from n to n+1 and stamps the raise, in one
// transaction guarded by an OVSDB "wait" on n: false, and nothing written,
// when nb_cfg is no longer n.
func raiseFrom(ctx context.Context, socket string, n int64) (bool, error) {
	stamp := strconv.FormatInt(time.Now().UnixMilli(), 10)
	res, err := ovsdb.Transact(ctx, socket, "OVN_Northbound",
		map[string]any{"op": "wait", "table": "NB_Global", "where": []any{}, "columns": []string{"nb_cfg"},
			"until": "==", "rows": []any{map[string]int64{"nb_cfg": n}}, "timeout": 0},
		map[string]any{"op": "mutate", "table": "NB_Global", "where": []any{}, "mutations": []any{
			[]any{"nb_cfg", "+=", 1},
			// A map's insert keeps an existing key: delete it first.
			[]any{"external_ids", "delete", []any{"set", []any{raisedAtKey}}},
			[]any{"external_ids", "insert", []any{"map", []any{[]any{raisedAtKey, stamp}}}},
		}})
	if err != nil {
		return false, fmt.Errorf("cannot raise NB_Global.nb_cfg: %w", err)
	}
	// A commit that failed (a leader change, say) answers with one
	// result more than the operations: nothing was raised.
	if len(res) > 2 && res[2].Error != "" {
		return false, fmt.Errorf("cannot raise NB_Global.nb_cfg: the commit failed: %s", res[2].Error)
	}
	switch {
	case res[0].Error == "" && res[1].Error == "":
		return true, nil
	case res[0].Error == "timed out":
		return false, nil
	}
	return false, fmt.Errorf("cannot raise NB_Global.nb_cfg: %s %s", res[0].Error, res[1].Error)
}
