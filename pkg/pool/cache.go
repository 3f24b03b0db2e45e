package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/statedir"
)

// stamp is a folder's identity and modification time.
type stamp struct {
	dev, ino uint64
	mtimeNs  int64
}

// keptFolder is host-local's count of one folder kept for STATUS, valid while the folder's identity
// and mtime are the same and the ranges counted are.
type keptFolder struct {
	Ranges  string  `json:"ranges"`
	Dev     uint64  `json:"dev"`
	Ino     uint64  `json:"ino"`
	MtimeNs int64   `json:"mtimeNs"`
	Used    []int64 `json:"used"`
}

// CountCached is Count, reusing the count kept in cachePath while host-local
// has added and removed nothing since. STATUS runs every few seconds, and
// reading a large pool's folder costs more than all the rest of STATUS
// (docs/benchmarks.md); the sidecar's pool watch counts on every change, so that STATUS finds the
// count kept. start is when the caller began, taken before this call.
//
// keepAt is zero when the count returned is kept (or came from the cache).
// Otherwise the folder changed too recently to keep a count of it, and a
// count started at keepAt could be kept. A cache that cannot be read or
// written only costs a count.
func (s *Spec) CountCached(cachePath string, start time.Time) (ranges []Range, keepAt time.Time, err error) {
	st, ok, err := folderStamp(s.Dir)
	if err == nil && !ok {
		ranges, err = s.Count() // nothing allocated yet
		return ranges, time.Time{}, err
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("status ipam: %s: %w", s.Dir, err)
	}
	want := keptFolder{Ranges: s.key(), Dev: st.dev, Ino: st.ino, MtimeNs: st.mtimeNs}
	if c, ok := readCache(cachePath); ok && c.matches(want) && len(c.Used) == len(s.ranges) {
		out := s.unused()
		for i := range out {
			out[i].Used = c.Used[i]
		}
		return out, time.Time{}, nil
	}
	out, err := s.Count()
	if err != nil {
		return nil, time.Time{}, err
	}
	mtime := time.Unix(0, want.MtimeNs)
	if at := keepableFrom(mtime); start.Before(at) {
		return out, at, nil
	}
	for _, r := range out {
		want.Used = append(want.Used, r.Used)
	}
	// The network's folder, never the state folder above it: a sidecar
	// whose mount differs from the entry's stateDir keeps nothing.
	if err := os.Mkdir(filepath.Dir(cachePath), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return out, time.Time{}, nil
	}
	if data, err := json.Marshal(want); err == nil {
		_ = atomicfile.Write(cachePath, data, 0o644) // best effort: the next call counts again
		removeStaleTemps(cachePath, start)
	}
	return out, time.Time{}, nil
}

// keepableFrom is the earliest start of a count that may be kept for a
// folder stamped mtime: one after which any change must stamp another
// mtime. The kernel stamps with its coarse clock, up to a tick behind the
// clock the caller reads, so two ticks must have passed. A file system
// that keeps whole seconds (or FAT's two) shows no sub-millisecond digits;
// a count is kept there only 2 s after the change.
func keepableFrom(mtime time.Time) time.Time {
	if mtime.Nanosecond()%int(time.Millisecond) == 0 {
		return mtime.Add(2 * time.Second)
	}
	tick, ok := coarseTick()
	if !ok {
		return mtime.Add(2 * time.Second)
	}
	return mtime.Add(2 * tick)
}

// CachePath is where a network's pool count is kept: in the network's
// marker folder, under a name that is never a marker's, so that marker GC
// removes the temp file of a writer killed while writing it.
func CachePath(stateDir, network string) string {
	return filepath.Join(stateDir, network, statedir.Pool)
}

// removeStaleTemps removes the temp files that a writer of the cache
// (STATUS or the sidecar) left when killed while writing (statedir.Sweep).
// Marker GC would too, but containerd never calls GC. The cache is only
// ever written whole, so its temp files' modification time tells their age.
func removeStaleTemps(cachePath string, now time.Time) {
	_, _ = statedir.Sweep(filepath.Dir(cachePath), filepath.Base(cachePath), statedir.Modified, now)
}

func readCache(path string) (keptFolder, bool) {
	var c keptFolder
	data, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(data, &c) != nil {
		return keptFolder{}, false
	}
	return c, true
}

func (c keptFolder) matches(o keptFolder) bool {
	return c.Ranges == o.Ranges && c.Dev == o.Dev && c.Ino == o.Ino && c.MtimeNs == o.MtimeNs
}

// key names the folder and the ranges counted in it.
func (s *Spec) key() string {
	k := s.Dir
	for _, rs := range s.ranges {
		k += " ["
		for _, r := range rs {
			k += fmt.Sprintf("%s %s-%s gw %s;", r.subnet, r.start, r.end, r.gateway)
		}
		k += "]"
	}
	return k
}
