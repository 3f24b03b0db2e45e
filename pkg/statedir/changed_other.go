//go:build !linux

package statedir

import (
	"io/fs"
	"time"
)

// changedAt is the modification time where the change time is not read:
// sweeps run only on Linux nodes; other systems build the command-line
// tools that share this package.
func changedAt(info fs.FileInfo) time.Time {
	return info.ModTime()
}
