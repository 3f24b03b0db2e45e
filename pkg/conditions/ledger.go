package conditions

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/publish"
)

// ledger is what the sidecar sent to each pod and what the API server
// refused for good. Its lock guards only its maps.
type ledger struct {
	metrics *metrics.Metrics

	mu      sync.Mutex
	sent    map[types.UID]sentCondition // what was last patched, per pod
	refused map[types.UID]refusal       // pods whose patch was refused for good
}

// refusal is a pod's condition patch that the API server refused for good.
// The same condition is not sent again before until; another one is.
type refusal struct {
	want    corev1.PodCondition
	until   time.Time
	backoff time.Duration
}

// sentCondition is a patch the pod cache may not show yet: while the cached
// pod is still at baseRV, the cache predates the patch.
type sentCondition struct {
	baseRV string
	cond   corev1.PodCondition
	at     time.Time
	// basis names the marker files (and read errors) cond came from.
	basis string
}

func newLedger(m *metrics.Metrics) *ledger {
	return &ledger{metrics: m, sent: map[types.UID]sentCondition{}, refused: map[types.UID]refusal{}}
}

// sentTo records a patch the API server took; a refusal of the pod ends.
func (l *ledger) sentTo(uid types.UID, s sentCondition) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent[uid] = s
	if _, ok := l.refused[uid]; ok {
		delete(l.refused, uid)
		l.metrics.RefusedPods.Set(float64(len(l.refused)))
	}
}

// lastSent is the last patch sent to the pod.
func (l *ledger) lastSent(uid types.UID) (sentCondition, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.sent[uid]
	return s, ok
}

// refuse records a refusal of want and returns the pause before it is
// sent again, and whether the pod was refused before.
func (l *ledger) refuse(uid types.UID, want corev1.PodCondition, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, again := l.refused[uid]
	r.backoff = min(max(refusedGrowth*r.backoff, refusedMin), refusedMax)
	r.want, r.until = want, now.Add(r.backoff)
	l.refused[uid] = r
	l.metrics.RefusedPods.Set(float64(len(l.refused)))
	return r.backoff, again
}

// stillRefused reports whether want was refused for the pod and its
// backoff has not run out, with how long is left.
func (l *ledger) stillRefused(uid types.UID, want corev1.PodCondition, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.refused[uid]
	if !ok || !publish.Shows(&r.want, want) {
		return 0, false
	}
	left := r.until.Sub(now)
	return left, left > 0
}

// forget drops a deleted pod.
func (l *ledger) forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.sent, uid)
	delete(l.refused, uid)
	l.metrics.RefusedPods.Set(float64(len(l.refused)))
}
