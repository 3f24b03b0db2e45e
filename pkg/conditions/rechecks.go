package conditions

import (
	"context"
	"errors"
	"io/fs"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/kubeapi"
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
		done, err := c.recheck(ctx, pending.Inputs{Store: c.store, CiliumEndpoints: countedCEPs{c}, Off: c.state.isOff}, m, sched, func(p *marker.Marker) {
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

// countedCEPs reads CiliumEndpoints for the re-checks with the controller's
// client, and counts the API server's failures (not "none yet", nor a read
// cut short by the re-check's own end; a read that ran out of its own
// time counts) in netready_api_errors_total, as its other requests are.
type countedCEPs struct{ c *Controller }

func (k countedCEPs) GetCiliumEndpoint(ctx context.Context, namespace, name string) ([]byte, error) {
	data, err := k.c.client.GetCiliumEndpoint(ctx, namespace, name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(ctx.Err(), context.Canceled) {
		k.c.metrics.APIErrors.WithLabelValues(kubeapi.Reason(err)).Inc()
	}
	return data, err
}
