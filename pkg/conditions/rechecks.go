package conditions

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/pending"
)

// rechecks are the re-checks of pending markers, one goroutine each, and
// their latest progress. Their lock guards only their maps; the marker
// index's lock, when both are held, is taken first (startCheck, forget),
// so that no re-check starts for a marker being forgotten.
type rechecks struct {
	metrics *metrics.Metrics

	mu       sync.Mutex
	checking map[string]*recheckState // by marker path
	progress map[string]*marker.Marker
}

// recheckState is one pending marker's re-check. A re-check that ended
// stays, done, so that it is not started again for the same marker (a pod
// whose netns is gone would otherwise restart it in a loop).
type recheckState struct {
	created time.Time
	cancel  context.CancelFunc
	done    bool
}

func newRechecks(m *metrics.Metrics) *rechecks {
	return &rechecks{metrics: m, checking: map[string]*recheckState{}, progress: map[string]*marker.Marker{}}
}

// begin records a re-check of path's marker created at created, unless
// one runs or ran for it; the returned state is nil then.
func (r *rechecks) begin(path string, created time.Time) (*recheckState, context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.checking[path]; st != nil {
		if st.created.Equal(created) {
			return nil, nil
		}
		st.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &recheckState{created: created, cancel: cancel}
	r.checking[path] = st
	r.setPendingLocked()
	return st, ctx
}

// report keeps a running re-check's progress.
func (r *rechecks) report(path string, st *recheckState, p *marker.Marker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checking[path] == st {
		r.progress[path] = p
	}
}

// end marks a re-check done.
func (r *rechecks) end(path string, st *recheckState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checking[path] == st {
		st.done = true
		r.setPendingLocked()
	}
}

// latest is the progress of path's re-check for the marker created at
// created, or nil.
func (r *rechecks) latest(path string, created time.Time) *marker.Marker {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.progress[path]; p != nil && p.CreatedAt.Equal(created) {
		return p
	}
	return nil
}

// stop ends path's re-check and forgets it.
func (r *rechecks) stop(path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.checking[path]; ok {
		st.cancel()
		delete(r.checking, path)
		r.setPendingLocked()
	}
	delete(r.progress, path)
}

// stopAll ends every re-check.
func (r *rechecks) stopAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, st := range r.checking {
		st.cancel()
		delete(r.checking, p)
	}
}

func (r *rechecks) setPendingLocked() {
	n := 0
	var oldest time.Time
	for _, st := range r.checking {
		if !st.done {
			n++
			if oldest.IsZero() || st.created.Before(oldest) {
				oldest = st.created
			}
		}
	}
	r.metrics.Pending.Set(float64(n))
	if oldest.IsZero() {
		r.metrics.PendingOldest.Set(0)
	} else {
		r.metrics.PendingOldest.Set(float64(oldest.UnixNano()) / 1e9)
	}
}

// startCheck goes on with a pending marker's checks, once per marker,
// until they hold, the marker goes, or the pod does. It never gives up:
// after --pending-timeout it backs off to one round a minute.
func (c *Controller) startCheck(path string, m *marker.Marker) {
	// Only while indexed: a marker DEL removed after it was read would
	// be re-checked until the IP is reused, and count as pending all
	// that time.
	var st *recheckState
	var ctx context.Context
	c.index.whileIndexed(path, func() { st, ctx = c.rechecks.begin(path, m.CreatedAt.Time) })
	if st == nil {
		return
	}
	podKey := m.Pod.Namespace + "/" + m.Pod.Name
	sched := pending.Schedule{Round: recheckRound, Patience: c.opts.PendingTimeout, MaxGap: recheckMax}
	go func() {
		defer st.cancel()
		_, err := c.recheck(ctx, c.store, m, sched, func(p *marker.Marker) {
			c.rechecks.report(path, st, p)
			c.queue.Add(podKey)
		})
		switch {
		case err == nil:
			c.log.Info("pending attachment is now programmed", "marker", path)
		case !errors.Is(err, context.Canceled):
			c.log.Warn("stopped re-checking a pending attachment", "marker", path, "err", err)
		}
		c.rechecks.end(path, st)
		c.queue.Add(podKey)
	}()
}
