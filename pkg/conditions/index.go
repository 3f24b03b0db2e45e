package conditions

import (
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/publish"
)

// markerIndex is what the Controller knows of each marker file: the pod it
// names, whether it could not be read, and which of its waits were
// counted. It does no I/O. Its lock guards only its maps; when the
// rechecks' lock is also taken (whileIndexed, forget), this one is taken
// first, so that no re-check starts for a marker being forgotten.
type markerIndex struct {
	mu      sync.Mutex
	markers map[string]markerRef          // marker path -> the pod it names
	byUID   map[types.UID]map[string]bool // pod UID -> marker paths
	// unreadable holds markers that exist but could not be read, with
	// why. One that is also in markers keeps its pod not ready; one that
	// is not (never read) may be any new pod's, so no pod is judged
	// NotObserved while it stays.
	unreadable map[string]error
	observed   map[string]string // marker path -> state whose wait was counted
	// addSeen holds, per marker path, the ADD (its start) already counted
	// in netready_add_wait_seconds.
	addSeen map[string]time.Time
}

// markerRef is what the index keeps of a marker file.
type markerRef struct {
	podKey string
	uid    types.UID
}

func newMarkerIndex() *markerIndex {
	return &markerIndex{markers: map[string]markerRef{}, byUID: map[types.UID]map[string]bool{},
		unreadable: map[string]error{}, observed: map[string]string{}, addSeen: map[string]time.Time{}}
}

// add indexes path as ref's marker.
func (x *markerIndex) add(path string, ref markerRef) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.markers[path]; ok && old.uid != ref.uid {
		x.unindexLocked(path)
	}
	x.markers[path] = ref
	if x.byUID[ref.uid] == nil {
		x.byUID[ref.uid] = map[string]bool{}
	}
	x.byUID[ref.uid][path] = true
}

// setUnreadable records that path exists but cannot be read, and returns
// the pod it names if it was ever read.
func (x *markerIndex) setUnreadable(path string, err error) (markerRef, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.unreadable[path] = err
	ref, ok := x.markers[path]
	return ref, ok
}

// readable clears path from the unreadable markers, and reports whether
// it was one that named no known pod.
func (x *markerIndex) readable(path string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, was := x.unreadable[path]
	_, known := x.markers[path]
	delete(x.unreadable, path)
	return was && !known
}

// forget drops all that is known of a removed marker, running also in the
// same step, and returns what it named.
func (x *markerIndex) forget(path string, also func()) (markerRef, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	also()
	ref, ok := x.markers[path]
	x.unindexLocked(path)
	delete(x.observed, path)
	delete(x.addSeen, path)
	delete(x.unreadable, path)
	return ref, ok
}

func (x *markerIndex) unindexLocked(path string) {
	ref, ok := x.markers[path]
	if !ok {
		return
	}
	delete(x.markers, path)
	if paths := x.byUID[ref.uid]; paths != nil {
		delete(paths, path)
		if len(paths) == 0 {
			delete(x.byUID, ref.uid)
		}
	}
}

// whileIndexed runs fn, in one step with the index, if path is indexed:
// forget cannot come in between.
func (x *markerIndex) whileIndexed(path string, fn func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.markers[path]; ok {
		fn()
	}
}

// paths are the pod's marker paths, sorted (a stable basis, see desired).
func (x *markerIndex) paths(uid types.UID) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Sorted(maps.Keys(x.byUID[uid]))
}

// known lists every marker the index holds something of.
func (x *markerIndex) known() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	paths := slices.Collect(maps.Keys(x.markers))
	for p := range x.unreadable {
		if _, ok := x.markers[p]; !ok {
			paths = append(paths, p)
		}
	}
	return paths
}

func (x *markerIndex) unreadablePaths() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Collect(maps.Keys(x.unreadable))
}

// strays are the unreadable markers that name no known pod.
func (x *markerIndex) strays() []publish.Unreadable {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []publish.Unreadable
	for p, err := range x.unreadable {
		if _, ok := x.markers[p]; !ok {
			out = append(out, publish.Unreadable{Path: p, Err: err})
		}
	}
	return out
}

// ofOtherUID lists the markers that name the pod podKey but not its UID
// uid: an older pod of the same name.
func (x *markerIndex) ofOtherUID(podKey string, uid types.UID) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []string
	for path, ref := range x.markers {
		if ref.podKey == podKey && ref.uid != uid {
			out = append(out, path)
		}
	}
	return out
}

// firstWait reports whether state (a marker's state and start) is new for
// path, and records it.
func (x *markerIndex) firstWait(path, state string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	seen := x.observed[path] == state
	x.observed[path] = state
	return !seen
}

// firstADD reports whether the ADD that began at created is new for path,
// and records it.
func (x *markerIndex) firstADD(path string, created time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	seen := x.addSeen[path].Equal(created)
	x.addSeen[path] = created
	return !seen
}
