package conditions

import (
	"context"
	"errors"

	"github.com/netready/netready/pkg/checks"
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
		done, err := c.recheck(ctx, pending.Inputs{Store: c.store, CiliumEndpoints: c.client}, m, sched, func(p *marker.Marker) {
			c.state.recheckProgressed(path, st, p)
			c.queue.Add(podKey)
		})
		switch {
		case err == nil:
			// The cross-node result's target names any chassis left out.
			c.log.Info("pending attachment is now programmed", "marker", path, "crossNode", crossNodeTarget(done))
		case !errors.Is(err, context.Canceled):
			c.log.Warn("stopped re-checking a pending attachment", "marker", path, "err", err)
		}
		c.state.recheckEnded(path, st)
		c.queue.Add(podKey)
	}()
}

// crossNodeTarget is the target of m's cross-node result, or "" when it
// has none.
func crossNodeTarget(m *marker.Marker) string {
	if m == nil {
		return ""
	}
	for _, c := range m.Checks {
		if c.Kind == checks.KindOVNCrossNode {
			return c.Target
		}
	}
	return ""
}
