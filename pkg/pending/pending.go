// Package pending owns going on with an attachment's checks after ADD gave
// up waiting (onTimeout "proceed"): rebuilding the checks from its pending
// marker, waiting on them in rounds so that progress can be shown, and
// rewriting the marker as ready once they hold.
package pending

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/wait"
)

// Recheck waits on m's checks until they all hold, then writes m as ready
// and returns it. Each round lasts at most round; after a round that did
// not finish, progress gets m with the checks' current reasons. It stops
// with ctx, or with an error when a check can never succeed (the pod is
// gone) or the marker was removed (DEL).
func Recheck(ctx context.Context, store marker.Store, m *marker.Marker, round time.Duration, progress func(*marker.Marker)) (*marker.Marker, error) {
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
	key := marker.Key{Network: m.Network, ContainerID: m.ContainerID, IfName: m.IfName}
	for {
		roundCtx, cancel := context.WithTimeout(ctx, round)
		out, err := wait.Until(roundCtx, cs, wait.Options{Since: m.CreatedAt.Time})
		cancel()
		if err != nil {
			return nil, err
		}
		next := marker.New(att, out, m.CreatedAt.Time)
		if !out.Ready() {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			next.State, next.ReadyAt, next.Pending = marker.StatePending, nil, m.Pending
			progress(next)
			continue
		}
		// DEL may have removed the marker meanwhile: never bring it back.
		if _, err := store.Read(key); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("marker removed while its checks ran: %w", err)
		}
		if err := store.Write(next); err != nil {
			return nil, err
		}
		return next, nil
	}
}
