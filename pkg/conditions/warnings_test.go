package conditions

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/notes"
)

// TestStandingWarningsAreRepeated: a note that holds is one Warning Event,
// not one per resync, and is recorded again once its Event would have
// expired, so that kubectl netready status goes on showing it.
func TestStandingWarningsAreRepeated(t *testing.T) {
	h := newHarness(t, func(o *Config) { o.Resync = 50 * time.Millisecond })
	var mu sync.Mutex
	clock := time.Now()
	h.c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	if err := notes.NoteInvalidConfig(h.c.opts.StateDir, "net1", `"timeout" must be between 0 and 100s`); err != nil {
		t.Fatal(err)
	}
	h.run()
	count := func(within time.Duration) int {
		n := 0
		for deadline := time.After(within); ; {
			select {
			case e := <-h.recorder.Events:
				if strings.Contains(e, "Warning "+nodewriter.ReasonInvalidConfig) {
					n++
				}
			case <-deadline:
				return n
			}
		}
	}
	if n := count(time.Second); n != 1 {
		t.Fatalf("%d Events for a note over many resyncs, want 1", n)
	}
	mu.Lock()
	clock = clock.Add(kubeapi.RepeatWarningAfter)
	mu.Unlock()
	if n := count(time.Second); n != 1 {
		t.Errorf("%d Events %s later while the note holds, want 1 more", n, kubeapi.RepeatWarningAfter)
	}
}
