//go:build unix

package install

import "golang.org/x/sys/unix"

// canWrite asks the kernel whether this process may write dir (a
// read-only mount says no even to root).
func canWrite(dir string) error { return unix.Access(dir, unix.W_OK) }
