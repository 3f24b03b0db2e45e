//go:build integration

package harness

import (
	"testing"
	"time"
)

// Within waits up to limit for ok, and fails the test if it never holds.
func Within(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	for start := time.Now(); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
	}
}

// Eventually polls cond for up to 15 s (containerd re-reads CNI status on
// each CRI Status call).
func Eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(200 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("%s: never; last: %s", what, last)
}
