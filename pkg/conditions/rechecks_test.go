package conditions

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/pending"
)

// TestNoRecheckForRemovedMarker: a marker that DEL removes after a worker
// read it, but before the worker starts its re-check, starts none: a
// re-check then would live until the IP is reused and keep the pod in
// netready_pending_attachments.
func TestNoRecheckForRemovedMarker(t *testing.T) {
	pod := gatedPod("deleted", "u-deleted")
	h := newHarness(t, nil, pod)
	var started atomic.Int32
	h.c.recheck = func(ctx context.Context, _ pending.Inputs, _ *marker.Marker, _ pending.Schedule, _ func(*marker.Marker)) (*marker.Marker, error) {
		started.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	var raced atomic.Bool
	read := h.c.read
	h.c.read = func(path string) (*marker.Marker, error) {
		m, err := read(path)
		// The first read by a worker (the scan read it before): DEL
		// removes the file, and its event is handled, right after.
		if err == nil && m.State == marker.StatePending && h.c.Ready() && raced.CompareAndSwap(false, true) {
			os.Remove(path)
			h.c.onMarker(path)
		}
		return m, err
	}
	h.writeMarker(pod, "podnet", "eth0", marker.StatePending, time.Now())
	h.run()
	h.settle()
	if !raced.Load() {
		t.Fatal("the race was not staged: no worker read the pending marker")
	}
	if n := started.Load(); n != 0 {
		t.Errorf("re-checks started for a marker DEL had removed = %d, want 0", n)
	}
	if got := testutil.ToFloat64(h.c.metrics.Pending); got != 0 {
		t.Errorf("netready_pending_attachments = %v, want 0", got)
	}
}
