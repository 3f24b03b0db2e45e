package pool

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/atomicfile"
)

// TestCountCached walks one pool through the cache's states; each step
// gives the count CountCached must return and whether the cache file
// must hold that count afterwards.
func TestCountCached(t *testing.T) {
	data, state := t.TempDir(), t.TempDir()
	dir := filepath.Join(data, "podnet")
	cache := filepath.Join(state, ".pool-podnet")
	raw, _ := json.Marshal(map[string]any{"dataDir": data, "ranges": [][]map[string]string{{{"subnet": "10.1.0.0/28"}}}})
	spec, err := Load("podnet", json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	age := func(d time.Duration) {
		t.Helper()
		at := time.Now().Add(-d)
		if err := os.Chtimes(dir, at, at); err != nil {
			t.Fatal(err)
		}
	}
	cached := func() []int64 {
		c, ok := readCache(cache)
		if !ok {
			return nil
		}
		return c.Used
	}
	steps := []struct {
		name       string
		do         func()
		want       int64
		wantCached []int64
	}{
		{"no folder yet: zero, nothing kept", func() {}, 0, nil},
		{"a folder just written is counted but not kept", func() { allocate(t, dir, "10.1.0.2", "10.1.0.3") }, 2, nil},
		{"a settled folder is counted and kept", func() { age(time.Minute) }, 2, []int64{2}},
		{"a kept count is used while the folder is unchanged", func() {
			c, _ := readCache(cache)
			c.Used = []int64{9} // only the cache says 9
			b, _ := json.Marshal(c)
			os.WriteFile(cache, b, 0o644)
		}, 9, []int64{9}},
		{"an allocation changes the mtime: counted again, not yet kept", func() { allocate(t, dir, "10.1.0.4") }, 3, []int64{9}},
		{"settled again: the new count is kept", func() { age(30 * time.Second) }, 3, []int64{3}},
		{"a release is seen", func() { os.Remove(filepath.Join(dir, "10.1.0.2")); age(20 * time.Second) }, 2, []int64{2}},
		{"an unreadable cache costs only a count", func() { os.WriteFile(cache, []byte("{"), 0o644) }, 2, []int64{2}},
		{"a folder removed and made again is counted again", func() {
			os.RemoveAll(dir)
			allocate(t, dir, "10.1.0.5")
			age(20 * time.Second)
		}, 1, []int64{1}},
	}
	for _, st := range steps {
		// A count that began as the folder changed, however slow this
		// machine: an mtime backdated by age is long before it.
		start := time.Now()
		st.do()
		got, _, err := spec.CountCached(cache, start)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got[0].Used != st.want {
			t.Errorf("%s: count %d, want %d", st.name, got[0].Used, st.want)
		}
		if diff := cmp.Diff(st.wantCached, cached()); diff != "" {
			t.Errorf("%s: kept count (-want +got):\n%s", st.name, diff)
		}
	}

	// Other ranges over the same folder never take the kept count.
	raw, _ = json.Marshal(map[string]any{"dataDir": data, "ranges": [][]map[string]string{{{"subnet": "10.1.0.0/29"}}}})
	other, err := Load("podnet", json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := readCache(cache)
	c.Used = []int64{7}
	b, _ := json.Marshal(c)
	os.WriteFile(cache, b, 0o644)
	got, _, err := other.CountCached(cache, time.Now())
	if err != nil || got[0].Used != 1 || got[0].Usable.Int64() != 5 {
		t.Errorf("other ranges: %+v, %v; want 1 of 5 used", got, err)
	}
}

// TestCountCachedConcurrent: STATUS calls at once, each counting and keeping
// a settled pool, all count right and leave one valid cache, no temp file.
// TestCountCachedRemovesStaleTemps: a temp file of the cache that a killed
// STATUS left goes when a count is next kept; another STATUS's fresh one,
// and other files' temps, stay.
func TestCountCachedRemovesStaleTemps(t *testing.T) {
	data, state := t.TempDir(), t.TempDir()
	dir := filepath.Join(data, "podnet")
	allocate(t, dir, "10.1.0.2")
	old := time.Now().Add(-time.Hour)
	os.Chtimes(dir, old, old)
	cache := filepath.Join(state, "podnet", ".pool")
	os.MkdirAll(filepath.Dir(cache), 0o755)
	files := map[string]time.Time{
		atomicfile.TempPrefix + ".pool.111":          old,
		atomicfile.TempPrefix + ".pool.222":          time.Now(),
		atomicfile.TempPrefix + "4f1c_eth0.json.333": old,
	}
	for name, at := range files {
		path := filepath.Join(state, "podnet", name)
		os.WriteFile(path, []byte("{"), 0o644)
		os.Chtimes(path, at, at)
	}
	raw, _ := json.Marshal(map[string]any{"dataDir": data, "ranges": [][]map[string]string{{{"subnet": "10.1.0.0/28"}}}})
	spec, err := Load("podnet", json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := spec.CountCached(cache, time.Now()); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(cache))
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{".pool", atomicfile.TempPrefix + ".pool.222", atomicfile.TempPrefix + "4f1c_eth0.json.333"}
	if diff := cmp.Diff(want, left); diff != "" {
		t.Errorf("files left (-want +got):\n%s", diff)
	}
}

func TestCountCachedConcurrent(t *testing.T) {
	data, state := t.TempDir(), t.TempDir()
	dir := filepath.Join(data, "podnet")
	allocate(t, dir, "10.1.0.2", "10.1.0.3", "10.1.0.4")
	old := time.Now().Add(-time.Minute)
	os.Chtimes(dir, old, old)
	cache := filepath.Join(state, "podnet", ".pool")
	raw, _ := json.Marshal(map[string]any{"dataDir": data, "ranges": [][]map[string]string{{{"subnet": "10.1.0.0/28"}}}})
	spec, err := Load("podnet", json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, _, err := spec.CountCached(cache, time.Now())
			if err != nil || got[0].Used != 3 {
				t.Errorf("CountCached = %+v, %v; want 3 used", got, err)
			}
		}()
	}
	wg.Wait()
	if c, ok := readCache(cache); !ok || len(c.Used) != 1 || c.Used[0] != 3 {
		t.Errorf("kept count %+v (readable %v), want [3]", c, ok)
	}
	entries, _ := os.ReadDir(filepath.Dir(cache))
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("state folder holds %v, want only .pool", names)
	}
}

// TestKeepableFrom: a count may be kept two coarse clock ticks after the
// folder's mtime, or two seconds after it when the mtime has no
// sub-millisecond digits (a file system that keeps whole seconds).
func TestKeepableFrom(t *testing.T) {
	var res unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_REALTIME_COARSE, &res); err != nil {
		t.Fatal(err)
	}
	tick := time.Duration(res.Nano())
	fine := time.Unix(1700000000, 123456789)
	for _, tc := range []struct {
		name  string
		mtime time.Time
		want  time.Duration
	}{
		{"nanosecond stamps: two ticks", fine, 2 * tick},
		{"whole seconds: two seconds", time.Unix(1700000000, 0), 2 * time.Second},
		{"whole milliseconds: two seconds", time.Unix(1700000000, 5_000_000), 2 * time.Second},
	} {
		if got := keepableFrom(tc.mtime).Sub(tc.mtime); got != tc.want {
			t.Errorf("%s: keepable %s after the mtime, want %s", tc.name, got, tc.want)
		}
	}
}
