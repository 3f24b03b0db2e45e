// Package oneproc gives the plugin one P from its first package init on.
//
// The plugin waits, it does not compute. With two Ps, each wake (a
// notification, a poll's answer) also wakes a second thread to look for
// work, at a storm's cost in CPU; and an ADD whose checks are already met
// runs its inits and its kernel work slower while the runtime's second
// thread spins up beside it (docs/benchmarks.md has the figures). Set
// here, the change comes before the other packages' inits (its import path
// sorts before theirs and it imports only runtime), not after them in main.
package oneproc

import "runtime"

func init() { runtime.GOMAXPROCS(1) }
