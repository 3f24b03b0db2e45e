// Package oneproc gives the plugin one P from its first package init on.
//
// The plugin waits, it does not compute. With two Ps, each wake (a
// notification, a poll's answer) also woke a second thread to look for
// work, which cost a storm of waiting ADDs a share of their CPU; and an
// ADD whose checks are already met ran its inits and its kernel work about
// a third slower while the runtime's second thread spun up beside it
// (docs/benchmarks.md). Set here, the change comes before the other
// packages' inits (its import path sorts before theirs and it imports only
// runtime), not after them in main.
package oneproc

import "runtime"

func init() { runtime.GOMAXPROCS(1) }
