package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/statedir"
)

// VerdictMaxAge is how old the sidecar's verdict may be before STATUS
// cannot tell: the sidecar writes it at every count, every few seconds,
// so a minute without one means the sidecar is not counting.
const VerdictMaxAge = time.Minute

// VerdictPath is where the sidecar keeps its count of a network's pool
// for STATUS: in the network's marker folder, beside STATUS's own kept
// answers, under a name that is never a marker's.
func VerdictPath(stateDir, network string) string {
	return filepath.Join(stateDir, network, statedir.PoolVerdict)
}

// WriteVerdict keeps the sidecar's count of a source's pool at path, as
// of at.
func WriteVerdict(path, source string, cnt Count, at time.Time) error {
	data, err := json.Marshal(keptCount{Source: source, At: at, Count: cnt})
	if err != nil {
		return fmt.Errorf("pool verdict: %w", err)
	}
	// The network's folder, never the state folder above it: a stateDir
	// that is not there is the plugin's to make.
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pool verdict: %w", err)
	}
	if err := atomicfile.Write(path, data, 0o644); err != nil {
		return fmt.Errorf("pool verdict: %w", err)
	}
	removeStaleTemps(path, at)
	return nil
}

// ReadVerdict is the sidecar's count of source's pool kept at path. What
// cannot be trusted is a Count that cannot tell, saying what to do: no
// verdict, one that cannot be read, one about another source, one from
// the future (the clock went back) or one older than VerdictMaxAge.
func ReadVerdict(path, source string, now time.Time) Count {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Count{Unknown: fmt.Sprintf("no verdict from netready-sidecar at %s: is the sidecar running on this node, with --cni-conf-dir on this network's config folder?", path)}
	}
	if err != nil {
		return Count{Unknown: fmt.Sprintf("netready-sidecar's verdict cannot be read: %v", err)}
	}
	var v keptCount
	if err := json.Unmarshal(data, &v); err != nil {
		return Count{Unknown: fmt.Sprintf("%s is not a verdict of netready-sidecar (%v): remove it; the sidecar writes it again within seconds", path, err)}
	}
	if err := v.Count.valid(); err != nil {
		return Count{Unknown: fmt.Sprintf("%s is not a verdict of netready-sidecar (%v): remove it; the sidecar writes it again within seconds", path, err)}
	}
	if v.Source != source {
		return Count{Unknown: fmt.Sprintf("netready-sidecar's verdict at %s counts a %q pool, not %q: the sidecar has not counted this network's pool since its source changed; is it running a netready of the same version?", path, v.Source, source)}
	}
	age := now.Sub(v.At)
	if age < 0 {
		return Count{Unknown: fmt.Sprintf("netready-sidecar's verdict at %s is dated %s, %s in the future: the clock went back; the sidecar's next count replaces it", path, v.At.UTC().Format(time.RFC3339), (-age).Round(time.Second))}
	}
	if age > VerdictMaxAge {
		return Count{Unknown: fmt.Sprintf("no verdict from netready-sidecar for %s: is the sidecar running on this node? (kubectl -n kube-system get pods -l app=netready --field-selector spec.nodeName=<node>)", age.Round(time.Second))}
	}
	cnt := v.Count
	said := fmt.Sprintf("netready-sidecar's count, %s old", age.Round(time.Second))
	if cnt.Said != "" {
		said = cnt.Said + " (" + said + ")"
	}
	cnt.Said = said
	return cnt
}

// valid rejects what no source counts: a range without a capacity, or
// with a negative count.
func (c Count) valid() error {
	for _, r := range c.Ranges {
		if r.Usable == nil || r.Usable.Sign() < 0 || r.Used < 0 || r.Cooling < 0 {
			return fmt.Errorf("range set %q has no valid count", r.Set)
		}
	}
	return nil
}

// fromSidecar is a source whose truth is in the API server, which only
// the sidecar reads (calico-ipam, ovn-kubernetes): STATUS reads the
// sidecar's verdict for it.
type fromSidecar struct {
	typ     string
	network string
	path    string
	scope   *Scope // nil: both families, every pool
}

// newFromSidecar makes typ's source for network, reading the verdict
// under the default stateDir until atStateDir says otherwise.
func newFromSidecar(typ, network string) *fromSidecar {
	return &fromSidecar{typ: typ, network: network, path: VerdictPath(config.DefaultStateDir, network)}
}

func (s *fromSidecar) Type() string  { return s.typ }
func (s *fromSidecar) Where() string { return s.path }

// Read is the sidecar's verdict, within VerdictMaxAge.
func (s *fromSidecar) Read(context.Context, *Memo) (Count, error) {
	return ReadVerdict(s.path, s.typ, time.Now()), nil
}

// atStateDir points a source that reads the sidecar's verdict at the
// entry's stateDir; other sources are returned as they are.
func atStateDir(src Source, stateDir string) Source {
	if v, ok := src.(*fromSidecar); ok && stateDir != "" {
		c := *v
		c.path = VerdictPath(stateDir, v.network)
		return &c
	}
	return src
}
