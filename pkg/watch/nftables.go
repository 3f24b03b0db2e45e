package watch

import (
	"context"
	"fmt"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
)

// openNFTables joins the nftables netlink group. The kernel ends each
// transaction with a new generation, so one token per batch is enough.
func openNFTables(ctx context.Context, nsPath string) (<-chan struct{}, error) {
	opts := []nftables.ConnOption{}
	if nsPath != "" {
		h, err := netns.GetFromPath(nsPath)
		if err != nil {
			return nil, fmt.Errorf("cannot open netns: %w", err)
		}
		defer h.Close()
		opts = append(opts, nftables.WithNetNSFd(int(h)))
	}
	conn, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	mon := nftables.NewMonitor(nftables.WithMonitorEventBuffer(16))
	events, err := conn.AddGenerationalMonitor(mon)
	if err != nil {
		return nil, fmt.Errorf("nftables monitor: %w", err)
	}
	out := make(chan struct{}, 1)
	go func() {
		<-ctx.Done()
		mon.Close()
	}()
	go func() {
		defer close(out)
		for range events {
			token(out)
		}
	}()
	return out, nil
}
