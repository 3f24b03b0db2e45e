package conditions

import (
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/outcome"
	"github.com/netready/netready/pkg/publish"
)

func (c *Controller) observeLatency(uid types.UID, want corev1.PodCondition) {
	if want.Reason != publish.ReasonProgrammed && want.Reason != publish.ReasonNotProgrammed {
		return
	}
	var newest time.Time
	for _, p := range c.state.paths(uid) {
		if info, err := os.Stat(p); err == nil && info.ModTime().After(newest) {
			newest = info.ModTime()
		}
	}
	if !newest.IsZero() {
		c.metrics.PublishLatency.Observe(time.Since(newest).Seconds())
	}
}

// observeWait records each marker state's wait once.
func (c *Controller) observeWait(path string, m *marker.Marker) {
	if c.state.firstWait(path, m.State+m.CreatedAt.String()) {
		c.metrics.MarkerWait.WithLabelValues(m.State).Observe(float64(m.WaitedMs) / 1000)
	}
}

// countADD counts the ADD a marker tells of in netready_add_wait_seconds,
// once, as the ADD left it: ready, or pending (timeout_proceed); a re-check
// that later makes it ready keeps its start and is not counted again.
func (c *Controller) countADD(path string, m *marker.Marker) {
	if !c.state.firstADD(path, m.CreatedAt.Time) || m.CreatedAt.Before(c.started) {
		return
	}
	o := outcome.Ready
	if m.State == marker.StatePending && !m.OnlyUnmet(checks.KindCiliumPublished) {
		o = outcome.TimeoutProceed
	}
	c.metrics.AddWait.WithLabelValues(m.Network, o).Observe(float64(m.WaitedMs) / 1000)
}

// readJournal counts the records appended to a network folder's outcome
// journal since it was last read. At start-up the journal is followed
// from its end: what is there was counted before a restart.
func (c *Controller) readJournal(dir string) {
	j := c.journals[dir]
	if j == nil {
		j = outcome.NewReader(dir, !c.scanned)
		c.journals[dir] = j
	}
	recs, err := j.Read()
	if err != nil {
		c.note(dir, "outcome journal", "err", err)
	}
	for _, r := range recs {
		c.metrics.AddWait.WithLabelValues(filepath.Base(dir), r.Outcome).Observe(float64(r.WaitedMs) / 1000)
	}
}
