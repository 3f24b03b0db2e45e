//go:build !linux

package atomicfile

// exchange has no one-step swap outside Linux: Replace reads, compares and
// renames. The command-line tools built for other systems (netready-install
// --validate, kubectl-netready) write no files.
func exchange(string, string) error { return errNoExchange }
