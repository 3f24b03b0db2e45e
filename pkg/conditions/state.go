package conditions

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/publish"
)

// state is all that the controller's main loop, workers, re-checks and
// informer share, behind one lock. Each change is one method named for the
// event, in one step: a pod's deletion, say, is atomic. No method waits,
// does I/O or calls back under the lock; what must happen after (a
// re-check's cancel, a gauge) is done once the lock is released.
type state struct {
	metrics *metrics.Metrics

	mu    sync.Mutex
	ready bool
	// markers: marker path -> the pod it names; byUID: pod UID -> its
	// marker paths.
	markers map[string]markerRef
	byUID   map[types.UID]map[string]bool
	// unreadable holds markers that exist but could not be read, with
	// why. One that is also in markers keeps its pod not ready; one that
	// is not (never read) may be any new pod's, so no pod is judged
	// NotObserved while it stays.
	unreadable map[string]error
	observed   map[string]string // marker path -> state whose wait was counted
	// addSeen holds, per marker path, the ADD (its start) already counted
	// in netready_add_wait_seconds.
	addSeen map[string]time.Time
	// checking: the re-checks of pending markers, by marker path, and
	// their latest progress.
	checking map[string]*recheckState
	progress map[string]*marker.Marker
	sent     map[types.UID]sentCondition // what was last patched, per pod
	refused  map[types.UID]refusal       // pods whose patch was refused for good
	logged   map[string]string           // marker path or pod key -> last situation logged
	gated    map[types.UID]bool          // this node's gated pods (gates are immutable)
	// worked: networks netready has worked for on this node -> whether
	// WorkedFile is written.
	worked map[string]bool
	// off: netready is switched off (Controller.SetOff).
	off bool
}

// markerRef is what the state keeps of a marker file.
type markerRef struct {
	podKey string
	uid    types.UID
}

// recheckState is one pending marker's re-check. A re-check that ended
// stays, done, so that it is not started again for the same marker (a pod
// whose netns is gone would otherwise restart it in a loop).
type recheckState struct {
	created time.Time
	cancel  context.CancelFunc
	done    bool
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

func newState(m *metrics.Metrics) *state {
	return &state{metrics: m, markers: map[string]markerRef{}, byUID: map[types.UID]map[string]bool{},
		unreadable: map[string]error{}, observed: map[string]string{}, addSeen: map[string]time.Time{},
		checking: map[string]*recheckState{}, progress: map[string]*marker.Marker{},
		sent: map[types.UID]sentCondition{}, refused: map[types.UID]refusal{}, logged: map[string]string{},
		gated: map[types.UID]bool{}, worked: map[string]bool{}}
}

// gauges are the figures the state's gauges show. They are set under the
// lock (a gauge's Set is a store, not a callback), so that two events never
// leave the older figure last.
type gauges struct {
	pending       int
	pendingOldest time.Time
	refused       int
	gated         int
}

func (s *state) gaugesLocked() gauges {
	g := gauges{refused: len(s.refused), gated: len(s.gated)}
	for _, st := range s.checking {
		if !st.done {
			g.pending++
			if g.pendingOldest.IsZero() || st.created.Before(g.pendingOldest) {
				g.pendingOldest = st.created
			}
		}
	}
	return g
}

func (s *state) set(g gauges) {
	s.metrics.Pending.Set(float64(g.pending))
	if g.pendingOldest.IsZero() {
		s.metrics.PendingOldest.Set(0)
	} else {
		s.metrics.PendingOldest.Set(float64(g.pendingOldest.UnixNano()) / 1e9)
	}
	s.metrics.RefusedPods.Set(float64(g.refused))
	s.metrics.GatedPods.Set(float64(g.gated))
}

// unlock sets the gauges, releases the lock, then cancels the re-checks
// an event ended.
func (s *state) unlock(cancels ...context.CancelFunc) {
	s.set(s.gaugesLocked())
	s.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
}

// started: the pod cache synced and every marker was read once.
func (s *state) started() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready = true
}

// switched: the off switch is now on (off) or not. It reports whether
// that changed.
func (s *state) switched(off bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.off != off
	s.off = off
	return changed
}

func (s *state) isOff() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.off
}

func (s *state) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// markerRead: path was read and names ref's pod. It reports whether path
// was an unreadable marker that named no known pod (a stray).
func (s *state) markerRead(path string, ref markerRef) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	stray := s.readableLocked(path)
	if old, ok := s.markers[path]; ok && old.uid != ref.uid {
		s.unindexLocked(path)
	}
	s.markers[path] = ref
	if s.byUID[ref.uid] == nil {
		s.byUID[ref.uid] = map[string]bool{}
	}
	s.byUID[ref.uid][path] = true
	return stray
}

// markerReadable: path was read (it names no pod, or was read again for
// its pod). It reports whether it was a stray.
func (s *state) markerReadable(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readableLocked(path)
}

func (s *state) readableLocked(path string) bool {
	_, was := s.unreadable[path]
	_, known := s.markers[path]
	delete(s.unreadable, path)
	return was && !known
}

// markerUnreadable: path exists but cannot be read. It returns the pod it
// names if it was ever read.
func (s *state) markerUnreadable(path string, err error) (markerRef, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unreadable[path] = err
	ref, ok := s.markers[path]
	return ref, ok
}

// markerGone: path was removed. All that is known of it goes, its
// re-check with it, in one step: a re-check cannot start for it after. It
// returns the pod it named, and whether it was a stray.
func (s *state) markerGone(path string) (ref markerRef, known, stray bool) {
	s.mu.Lock()
	stray = s.readableLocked(path)
	ref, known = s.markers[path]
	s.unindexLocked(path)
	delete(s.observed, path)
	delete(s.addSeen, path)
	delete(s.logged, path)
	cancel := s.stopLocked(path)
	s.unlock(cancel)
	return ref, known, stray
}

func (s *state) unindexLocked(path string) {
	ref, ok := s.markers[path]
	if !ok {
		return
	}
	delete(s.markers, path)
	if paths := s.byUID[ref.uid]; paths != nil {
		delete(paths, path)
		if len(paths) == 0 {
			delete(s.byUID, ref.uid)
		}
	}
}

// podSeen: a gated pod is on the node.
func (s *state) podSeen(uid types.UID) {
	s.mu.Lock()
	s.gated[uid] = true
	s.unlock()
}

// podGone: a pod was deleted. Its markers' re-checks stop (DEL or GC
// removes the markers themselves), and what was sent to it is forgotten.
func (s *state) podGone(uid types.UID, key string) {
	s.mu.Lock()
	var cancels []context.CancelFunc
	for path := range s.byUID[uid] {
		cancels = append(cancels, s.stopLocked(path))
	}
	delete(s.sent, uid)
	delete(s.refused, uid)
	delete(s.logged, key)
	delete(s.gated, uid)
	s.unlock(cancels...)
}

// podOutOfScope: the pod lost its gate's scope; its markers stay on disk
// for CHECK, and are no longer re-checked.
func (s *state) podOutOfScope(uid types.UID) {
	s.mu.Lock()
	var cancels []context.CancelFunc
	for path := range s.byUID[uid] {
		cancels = append(cancels, s.stopLocked(path))
	}
	s.unlock(cancels...)
}

// recheckBegun records a re-check of path's marker created at created,
// only while path is indexed (a marker DEL removed after it was read would
// be re-checked until the IP is reused), and unless one runs or ran for
// it; the returned state is nil then.
func (s *state) recheckBegun(path string, created time.Time) (*recheckState, context.Context) {
	s.mu.Lock()
	var cancels []context.CancelFunc
	defer func() { s.unlock(cancels...) }()
	if _, ok := s.markers[path]; !ok {
		return nil, nil
	}
	if st := s.checking[path]; st != nil {
		if st.created.Equal(created) {
			return nil, nil
		}
		cancels = append(cancels, st.cancel)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &recheckState{created: created, cancel: cancel}
	s.checking[path] = st
	return st, ctx
}

// recheckProgressed keeps a running re-check's progress.
func (s *state) recheckProgressed(path string, st *recheckState, p *marker.Marker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checking[path] == st {
		s.progress[path] = p
	}
}

// recheckEnded marks a re-check done.
func (s *state) recheckEnded(path string, st *recheckState) {
	s.mu.Lock()
	if s.checking[path] == st {
		st.done = true
	}
	s.unlock()
}

// recheckStopped: path's marker is no longer pending; its re-check ends
// and is forgotten.
func (s *state) recheckStopped(path string) {
	s.mu.Lock()
	s.unlock(s.stopLocked(path))
}

// stopLocked forgets path's re-check and returns its cancel.
func (s *state) stopLocked(path string) context.CancelFunc {
	cancel := func() {}
	if st, ok := s.checking[path]; ok {
		cancel = st.cancel
		delete(s.checking, path)
	}
	delete(s.progress, path)
	return cancel
}

// stopped: the controller ends; so does every re-check.
func (s *state) stopped() {
	s.mu.Lock()
	var cancels []context.CancelFunc
	for p, st := range s.checking {
		cancels = append(cancels, st.cancel)
		delete(s.checking, p)
	}
	s.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
}

// latest is the progress of path's re-check for the marker created at
// created, or nil.
func (s *state) latest(path string, created time.Time) *marker.Marker {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.progress[path]; p != nil && p.CreatedAt.Equal(created) {
		return p
	}
	return nil
}

// sentTo: the API server took a patch; a refusal of the pod ends.
func (s *state) sentTo(uid types.UID, c sentCondition) {
	s.mu.Lock()
	s.sent[uid] = c
	delete(s.refused, uid)
	s.unlock()
}

// lastSent is the last patch sent to the pod.
func (s *state) lastSent(uid types.UID) (sentCondition, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.sent[uid]
	return c, ok
}

// refusedFor: the API server refused want for good. It returns the pause
// before it is sent again, and whether the pod was refused before.
func (s *state) refusedFor(uid types.UID, want corev1.PodCondition, now time.Time) (time.Duration, bool) {
	s.mu.Lock()
	defer s.unlock()
	r, again := s.refused[uid]
	r.backoff = min(max(refusedGrowth*r.backoff, refusedMin), refusedMax)
	r.want, r.until = want, now.Add(r.backoff)
	s.refused[uid] = r
	return r.backoff, again
}

// stillRefused reports whether want was refused for the pod and its
// backoff has not run out, with how long is left.
func (s *state) stillRefused(uid types.UID, want corev1.PodCondition, now time.Time) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.refused[uid]
	if !ok || !publish.Shows(&r.want, want) {
		return 0, false
	}
	left := r.until.Sub(now)
	return left, left > 0
}

// firstLog reports whether msg is new for key, and records it.
func (s *state) firstLog(key, msg string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := s.logged[key] == msg
	s.logged[key] = msg
	return !seen
}

// firstWait reports whether st (a marker's state and start) is new for
// path, and records it.
func (s *state) firstWait(path, st string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := s.observed[path] == st
	s.observed[path] = st
	return !seen
}

// firstADD reports whether the ADD that began at created is new for path,
// and records it.
func (s *state) firstADD(path string, created time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := s.addSeen[path].Equal(created)
	s.addSeen[path] = created
	return !seen
}

// hasWorked reports whether netready has worked for network on this node.
func (s *state) hasWorked(network string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.worked[network]
	return ok
}

// networkWorked: network worked on this node, and written says whether
// WorkedFile records it. It reports whether the file still needs writing.
func (s *state) networkWorked(network string, written bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.worked[network] {
		return false
	}
	s.worked[network] = written
	return !written
}

// paths are the pod's marker paths, sorted (a stable basis, see desired).
func (s *state) paths(uid types.UID) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.byUID[uid]))
}

// known lists every marker the state holds something of.
func (s *state) known() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	paths := slices.Collect(maps.Keys(s.markers))
	for p := range s.unreadable {
		if _, ok := s.markers[p]; !ok {
			paths = append(paths, p)
		}
	}
	return paths
}

func (s *state) unreadablePaths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.unreadable))
}

// strays are the unreadable markers that name no known pod.
func (s *state) strays() []publish.Unreadable {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []publish.Unreadable
	for p, err := range s.unreadable {
		if _, ok := s.markers[p]; !ok {
			out = append(out, publish.Unreadable{Path: p, Err: err})
		}
	}
	return out
}

// ofOtherUID lists the markers that name the pod podKey but not its UID
// uid: an older pod of the same name.
func (s *state) ofOtherUID(podKey string, uid types.UID) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for path, ref := range s.markers {
		if ref.podKey == podKey && ref.uid != uid {
			out = append(out, path)
		}
	}
	return out
}
