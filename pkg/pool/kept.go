package pool

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/statedir"
)

// keptFor is how long STATUS reuses an agent's answer. containerd runs
// STATUS on every CRI Status call, and each is a new process: without a
// kept answer each would ask the agent. The agents refresh their own
// counts no faster (Cilium's status collector: every 5 s), so a younger
// answer would tell nothing new.
const keptFor = 3 * time.Second

// keptCount is a count kept in the network's state folder for STATUS: an
// agent's answer, which STATUS keeps for keptFor with the source's memo
// (which outlives the answer), or the sidecar's verdict on a pool in the
// API server. Source names who counted; At is when.
type keptCount struct {
	Source string    `json:"source"`
	At     time.Time `json:"at"`
	Count  Count     `json:"count"`
	Memo   Memo      `json:"memo,omitzero"`
}

// AgentCachePath is where STATUS keeps an agent's answer for a network:
// in the network's marker folder, beside host-local's kept count
// (CachePath), under a name that is never a marker's.
func AgentCachePath(stateDir, network string) string {
	return filepath.Join(stateDir, network, statedir.PoolAgent)
}

// ReadKept reads src for STATUS: the answer kept at path when it is from
// the same source and younger than keptFor, or else a new read, which it
// keeps there. "Cannot tell" is kept too, so that a hung agent costs one
// bounded read per keptFor, not one per call. A kept answer that cannot
// be read or written only costs a read.
func ReadKept(ctx context.Context, src Source, path string, now time.Time) (Count, error) {
	key := src.Type() + " " + src.Where()
	var k keptCount
	if data, err := os.ReadFile(path); err == nil && json.Unmarshal(data, &k) == nil && k.Source == key {
		// An answer from the future (the clock went back) is not kept.
		if age := now.Sub(k.At); age >= 0 && age < keptFor {
			return k.Count, nil
		}
	} else {
		k = keptCount{}
	}
	memo := k.Memo
	cnt, err := src.Read(ctx, &memo)
	if err != nil {
		return Count{}, err
	}
	data, err := json.Marshal(keptCount{Source: key, At: now, Count: cnt, Memo: memo})
	if err != nil {
		return cnt, nil
	}
	// The network's folder, never the state folder above it.
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return cnt, nil
	}
	_ = atomicfile.Write(path, data, 0o644) // best effort: the next call reads again
	removeStaleTemps(path, now)
	return cnt, nil
}

// ReadForStatus counts a network's pool as STATUS does: host-local's
// folder through its kept count (CountCached), an agent through its kept
// answer (ReadKept), a pool in the API server through the sidecar's
// verdict (ReadVerdict).
func ReadForStatus(ctx context.Context, network, stateDir string, ipam json.RawMessage) (Count, error) {
	src, err := New(network, ipam)
	if err != nil {
		return Count{}, err
	}
	switch OriginOf(src) {
	case Sidecar:
		// A small file the sidecar rewrites every few seconds: nothing
		// to keep.
		return ReadVerdict(VerdictPath(stateDir, network), src.Type(), time.Now()), nil
	case Folder:
		rs, _, err := src.(*Spec).CountCached(CachePath(stateDir, network), time.Now())
		if err != nil {
			return Count{}, err
		}
		return Count{Ranges: rs}, nil
	}
	return ReadKept(ctx, src, AgentCachePath(stateDir, network), time.Now())
}
