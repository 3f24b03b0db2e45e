package conditions

import (
	"context"
	"errors"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/pending"
)

// startCheck goes on with a pending marker's checks, once per marker,
// until they hold, the marker goes, or the pod does. It never gives up:
// after --pending-timeout it backs off to one round a minute.
func (c *Controller) startCheck(path string, m *marker.Marker) {
	st, ctx := c.state.recheckBegun(path, m.CreatedAt.Time)
	if st == nil {
		return
	}
	podKey := m.Pod.Namespace + "/" + m.Pod.Name
	sched := pending.Schedule{Round: recheckRound, Patience: c.opts.PendingTimeout, MaxGap: recheckMax}
	go func() {
		defer st.cancel()
		_, err := c.recheck(ctx, c.store, m, sched, func(p *marker.Marker) {
			c.state.recheckProgressed(path, st, p)
			c.queue.Add(podKey)
		})
		switch {
		case err == nil:
			c.log.Info("pending attachment is now programmed", "marker", path)
		case !errors.Is(err, context.Canceled):
			c.log.Warn("stopped re-checking a pending attachment", "marker", path, "err", err)
		}
		c.state.recheckEnded(path, st)
		c.queue.Add(podKey)
	}()
}
