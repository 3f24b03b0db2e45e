package atomicfile

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// exchange swaps two paths in one step (renameat2 RENAME_EXCHANGE). It
// returns errNoExchange where the file system cannot.
func exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("%w: %w", errNoExchange, err)
	}
	return err
}
