package conditions

import (
	"context"
	"errors"
	"time"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/pending"
)

// startCheck goes on with a pending marker's checks, once per marker,
// until they hold, the marker goes, or the pod does. It never gives up:
// after --pending-timeout it backs off to one round a minute.
func (c *Controller) startCheck(path string, m *marker.Marker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, indexed := c.markers[path]; !indexed {
		// DEL removed it after it was read: a re-check now would live
		// until the IP is reused, and count as pending all that time.
		return
	}
	if st := c.checking[path]; st != nil {
		if st.created.Equal(m.CreatedAt.Time) {
			return
		}
		st.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &recheckState{created: m.CreatedAt.Time, cancel: cancel}
	c.checking[path] = st
	c.setPendingLocked()
	podKey := m.Pod.Namespace + "/" + m.Pod.Name
	sched := pending.Schedule{Round: recheckRound, Patience: c.opts.PendingTimeout, MaxGap: recheckMax}
	go func() {
		defer cancel()
		_, err := c.recheck(ctx, c.store, m, sched, func(p *marker.Marker) {
			c.mu.Lock()
			if c.checking[path] == st {
				c.progress[path] = p
			}
			c.mu.Unlock()
			c.queue.Add(podKey)
		})
		switch {
		case err == nil:
			c.log.Info("pending attachment is now programmed", "marker", path)
		case !errors.Is(err, context.Canceled):
			c.log.Warn("stopped re-checking a pending attachment", "marker", path, "err", err)
		}
		c.mu.Lock()
		if c.checking[path] == st {
			st.done = true
			c.setPendingLocked()
		}
		c.mu.Unlock()
		c.queue.Add(podKey)
	}()
}

func (c *Controller) setPendingLocked() {
	n := 0
	var oldest time.Time
	for _, st := range c.checking {
		if !st.done {
			n++
			if oldest.IsZero() || st.created.Before(oldest) {
				oldest = st.created
			}
		}
	}
	c.metrics.Pending.Set(float64(n))
	if oldest.IsZero() {
		c.metrics.PendingOldest.Set(0)
	} else {
		c.metrics.PendingOldest.Set(float64(oldest.UnixNano()) / 1e9)
	}
}

func (c *Controller) stopCheck(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopCheckLocked(path)
}

func (c *Controller) stopCheckLocked(path string) {
	if st, ok := c.checking[path]; ok {
		st.cancel()
		delete(c.checking, path)
		c.setPendingLocked()
	}
	delete(c.progress, path)
}

func (c *Controller) stopAllChecks() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, st := range c.checking {
		st.cancel()
		delete(c.checking, p)
	}
}
