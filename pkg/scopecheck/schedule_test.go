package scopecheck

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSchedule: when Keep checks next after each event: the long clock
// while watching, the short one while not (at once when the watch
// closes), a change after it settles plus its spread, at most MaxSettle
// after the first of a burst, then once more to confirm; a hold backs
// off; informers synced after the last check count as a change.
func TestSchedule(t *testing.T) {
	timing := Timing{Period: 30 * time.Minute, Unwatched: 2 * time.Minute,
		Settle: 2 * time.Second, MaxSettle: 10 * time.Second, Spread: 4 * time.Second, Confirm: 30 * time.Second}
	// Half of each jitter: a period gets a twentieth more, a spread 2 s.
	half := func(d time.Duration) time.Duration { return d / 2 }
	const long, short = 31*time.Minute + 30*time.Second, 2*time.Minute + 6*time.Second
	inForce, held := Verdict{Write: true}, Verdict{Err: ErrUnscoped}
	ms := time.Millisecond

	type step struct {
		change   bool          // the watch saw a change at At
		watch    *bool         // the watch is open (or not) at At, synced at Synced
		synced   time.Duration //
		check    *Verdict      // a check from At to At+100ms
		until    time.Duration // a hold on an unknown scope ends then
		at, want time.Duration // want: next() after the step
	}
	open, closed := true, false
	tests := []struct {
		name     string
		watching bool
		steps    []step
	}{
		{"the long clock while watching", true, []step{
			{at: 0, want: long},
			{check: &inForce, at: long, want: long + 100*ms + long},
		}},
		{"the short clock while not watching", false, []step{
			{at: 0, want: short},
			{check: &inForce, at: short, want: short + 100*ms + short},
		}},
		{"a change: settled, spread, confirmed once", true, []step{
			{change: true, at: 10 * time.Second, want: 14 * time.Second},
			{check: &inForce, at: 14 * time.Second, want: 46*time.Second + 100*ms},
			{check: &inForce, at: 46*time.Second + 100*ms, want: 46*time.Second + 200*ms + long},
		}},
		{"a burst of changes: MaxSettle after the first", true, []step{
			{change: true, at: 0, want: 4 * time.Second},
			{change: true, at: 1500 * ms, want: 5500 * ms},
			{change: true, at: 6 * time.Second, want: 10 * time.Second},
			{change: true, at: 9 * time.Second, want: 12 * time.Second},
			{check: &inForce, at: 12 * time.Second, want: 44*time.Second + 100*ms},
		}},
		{"a check before the change settled leaves it pending", true, []step{
			{change: true, at: 10 * time.Second, want: 14 * time.Second},
			{check: &inForce, at: 12 * time.Second, want: 14 * time.Second},
			{check: &inForce, at: 14 * time.Second, want: 46*time.Second + 100*ms},
		}},
		{"a hold backs off to MaxGap, with no confirmation", true, []step{
			{change: true, at: 0, want: 4 * time.Second},
			{check: &held, at: 4 * time.Second, want: 5*time.Second + 100*ms},
			{check: &held, at: 5*time.Second + 100*ms, want: 7*time.Second + 200*ms},
			{check: &held, at: 7*time.Second + 200*ms, want: 11*time.Second + 300*ms},
			{check: &held, at: 11*time.Second + 300*ms, want: 19*time.Second + 400*ms},
			{check: &held, at: 19*time.Second + 400*ms, want: 35*time.Second + 500*ms},
			{check: &held, at: 35*time.Second + 500*ms, want: 65*time.Second + 600*ms},
			{check: &inForce, at: 65*time.Second + 600*ms, want: 65*time.Second + 700*ms + long},
		}},
		{"a hold on an unknown scope wakes when it ends", true, []step{
			{check: &Verdict{Err: ErrUnknown}, until: 500 * ms, at: 0, want: 500 * ms},
		}},
		{"the watch closes: the short clock at once; open again: the long one from the last check", true, []step{
			{watch: &closed, at: 10 * time.Minute, want: 10*time.Minute + short},
			{check: &inForce, at: 10*time.Minute + short, want: 10*time.Minute + short + 100*ms + short},
			{watch: &open, synced: -time.Second, at: 13 * time.Minute, want: 10*time.Minute + short + long},
		}},
		{"informers synced after the last check: a change", false, []step{
			{watch: &open, synced: time.Second, at: 1 * time.Second, want: 5 * time.Second},
		}},
		{"writing on an unknown scope: no confirmation", true, []step{
			{change: true, at: 0, want: 4 * time.Second},
			{check: &Verdict{Err: ErrUnknown, Write: true}, at: 4 * time.Second, want: 4*time.Second + 100*ms + long},
		}},
	}
	t0 := time.Unix(1e9, 0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSchedule(timing, 30*time.Second, half, t0, tc.watching)
			var want, got []time.Duration
			for _, st := range tc.steps {
				at := t0.Add(st.at)
				switch {
				case st.change:
					s.changed(at)
				case st.watch != nil:
					s.watch(at, *st.watch, t0.Add(st.synced))
				case st.check != nil:
					var until time.Time
					if st.until != 0 {
						until = at.Add(st.until)
					}
					s.checked(at, at.Add(100*ms), *st.check, until)
				}
				want, got = append(want, st.want), append(got, s.next().Sub(t0))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("next check after each step (-want +got):\n%s", diff)
			}
		})
	}
}
