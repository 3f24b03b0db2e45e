package wait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/watch"
)

// fakeCheck is ready from its n-th probe on (n 0: never), or fails with
// err: always, or for its first errFor probes.
type fakeCheck struct {
	target  string
	readyAt int32
	probes  atomic.Int32
	err     error
	errFor  int32
	hang    time.Duration
}

func (f *fakeCheck) Kind() string            { return "fake" }
func (f *fakeCheck) Target() string          { return f.target }
func (f *fakeCheck) Sources() []watch.Source { return nil }
func (f *fakeCheck) Probe(ctx context.Context) (bool, string, error) {
	n := f.probes.Add(1)
	if f.hang > 0 {
		time.Sleep(f.hang) // ignores ctx on purpose
	}
	if f.err != nil && (f.errFor == 0 || n <= f.errFor) {
		return false, "", f.err
	}
	return f.readyAt > 0 && n >= f.readyAt, "not yet", nil
}

func TestUntil(t *testing.T) {
	errGone := fmt.Errorf("%w: gone", checks.ErrNever)
	errTransient := errors.New("netlink: no buffer space available")
	tests := []struct {
		name      string
		checks    []*fakeCheck
		timeout   time.Duration
		wantReady []bool
		wantErr   string
		wantUnmet string
	}{
		{"no checks", nil, time.Second, []bool{}, "", ""},
		{"ready at once", []*fakeCheck{{target: "a", readyAt: 1}}, time.Second, []bool{true}, "", ""},
		{"ready after polling", []*fakeCheck{{target: "a", readyAt: 4}, {target: "b", readyAt: 1}}, 5 * time.Second, []bool{true, true}, "", ""},
		{"timeout names the unmet", []*fakeCheck{{target: "a", readyAt: 1}, {target: "b"}}, 200 * time.Millisecond, []bool{true, false}, "", "fake b (not yet)"},
		{"never fails at once", []*fakeCheck{{target: "a"}, {target: "b", err: errGone}}, time.Minute, nil, "check fake b: can never succeed: gone", ""},
		{"transient error is retried", []*fakeCheck{{target: "a", err: errTransient, errFor: 2, readyAt: 3}}, 5 * time.Second, []bool{true}, "", ""},
		{"transient error until the deadline names it", []*fakeCheck{{target: "a", err: errTransient}}, 200 * time.Millisecond, []bool{false}, "", "fake a (netlink: no buffer space available)"},
		{"deadline beats a stuck probe", []*fakeCheck{{target: "a", hang: 3 * time.Second}}, 200 * time.Millisecond, []bool{false}, "", "fake a (still probing at the deadline)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			var cs []checks.Check
			for _, c := range tt.checks {
				cs = append(cs, c)
			}
			start := time.Now()
			out, err := Until(ctx, cs, Options{})
			if time.Since(start) > tt.timeout+time.Second {
				t.Errorf("Until took %s with a %s timeout", time.Since(start), tt.timeout)
			}
			if tt.wantErr != "" {
				var never *NeverError
				if err == nil || err.Error() != tt.wantErr || !errors.As(err, &never) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := make([]bool, len(out.Results))
			for i, r := range out.Results {
				got[i] = r.Ready
			}
			if diff := cmp.Diff(tt.wantReady, got); diff != "" {
				t.Errorf("ready (-want +got):\n%s", diff)
			}
			if !strings.Contains(out.Unmet(), tt.wantUnmet) || (tt.wantUnmet == "") != out.Ready() {
				t.Errorf("Unmet() = %q, want %q", out.Unmet(), tt.wantUnmet)
			}
		})
	}
}

// lateTimer is a context whose deadline has passed but whose timer has not
// fired yet, as a socket deadline can see it.
type lateTimer struct {
	context.Context
	d time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.d, true }

func TestDeadlinePassed(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"no deadline", context.Background(), false},
		{"deadline ahead", lateTimer{context.Background(), time.Now().Add(time.Hour)}, false},
		{"deadline passed, timer not fired", lateTimer{context.Background(), time.Now().Add(-time.Millisecond)}, true},
		{"cancelled", cancelled, true},
	}
	for _, tt := range tests {
		if got := deadlinePassed(tt.ctx); got != tt.want {
			t.Errorf("%s: deadlinePassed = %v, want %v", tt.name, got, tt.want)
		}
	}
}
