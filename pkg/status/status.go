// Package status owns the answer to CNI STATUS: whether this host can take
// ADDs now. Every probe is bounded by the caller's context, which STATUS
// keeps under one second.
package status

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/config"
)

// Check returns nil when the host can take ADDs, or an error that says why.
func Check(ctx context.Context, conf *config.NetConf) error {
	if err := stateDirUsable(conf.StateDir); err != nil {
		return err
	}
	return ctx.Err()
}

// stateDirUsable: ADD must be able to write markers there.
func stateDirUsable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("state directory %s is not usable: %w", dir, err)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("state directory %s is not writable: %w", dir, err)
	}
	return nil
}
