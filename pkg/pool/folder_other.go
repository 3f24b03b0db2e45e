//go:build !linux

package pool

import (
	"errors"
	"net/netip"
	"time"
)

// errNotLinux is host-local's folder read where netready does not run:
// only the installer builds for other systems, and it counts no pool.
var errNotLinux = errors.New("status ipam: host-local's folder is counted on Linux only")

func folderStamp(string) (stamp, bool, error) { return stamp{}, false, errNotLinux }

func coarseTick() (time.Duration, bool) { return 0, false }

func eachAddress(string, func(netip.Addr)) error { return errNotLinux }
