package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/atomicfile"
)

// settle is how long the allocation folder must have been unchanged before
// a count of it is kept. A file added later changes the folder's mtime to a
// later time, even on a file system whose clock ticks coarsely; only a
// clock stepped back by more than this could hide a change.
const settle = time.Second

// countCache is a count of one folder, valid while the folder's identity
// and mtime are the same and the ranges counted are.
type countCache struct {
	Ranges  string  `json:"ranges"`
	Dev     uint64  `json:"dev"`
	Ino     uint64  `json:"ino"`
	MtimeNs int64   `json:"mtimeNs"`
	Used    []int64 `json:"used"`
}

// CountCached is Count, reusing the count kept in cachePath while host-local
// has added and removed nothing since. STATUS runs every few seconds, and a
// pool of 65,000 addresses costs a folder read of tens of milliseconds. A
// cache that cannot be read or written only costs a count.
func (s *Spec) CountCached(cachePath string, now time.Time) ([]Range, error) {
	var st unix.Stat_t
	err := unix.Stat(s.Dir, &st)
	if errors.Is(err, unix.ENOENT) {
		return s.Count() // nothing allocated yet
	}
	if err != nil {
		return nil, fmt.Errorf("status ipam: %s: %w", s.Dir, err)
	}
	want := countCache{Ranges: s.key(), Dev: uint64(st.Dev), Ino: st.Ino, MtimeNs: st.Mtim.Nano()}
	if c, ok := readCache(cachePath); ok && c.matches(want) && len(c.Used) == len(s.ranges) {
		out := s.unused()
		for i := range out {
			out[i].Used = c.Used[i]
		}
		return out, nil
	}
	out, err := s.Count()
	if err != nil {
		return nil, err
	}
	if now.Sub(time.Unix(0, want.MtimeNs)) > settle {
		for _, r := range out {
			want.Used = append(want.Used, r.Used)
		}
		if data, err := json.Marshal(want); err == nil && os.MkdirAll(filepath.Dir(cachePath), 0o755) == nil {
			atomicfile.Write(cachePath, data, 0o644) // best effort
			removeStaleTemps(cachePath, now)
		}
	}
	return out, nil
}

// staleTemp is how old a temp file of the cache must be before a STATUS
// removes it: older than any STATUS can run.
const staleTemp = time.Minute

// removeStaleTemps removes the temp files that a STATUS killed while
// writing the cache left. Marker GC would too, but containerd never calls
// GC. A fresh one may be another STATUS's write in progress.
func removeStaleTemps(cachePath string, now time.Time) {
	dir, name := filepath.Split(cachePath)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if target, ok := atomicfile.TempTarget(e.Name()); !ok || target != name {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > staleTemp {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func readCache(path string) (countCache, bool) {
	var c countCache
	data, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(data, &c) != nil {
		return countCache{}, false
	}
	return c, true
}

func (c countCache) matches(o countCache) bool {
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
