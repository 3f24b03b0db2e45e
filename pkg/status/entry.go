package status

import (
	"encoding/json"
	"fmt"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/notes"
	"github.com/netready/netready/pkg/pool"
)

// countedPool is the ipam object of the pool STATUS counts for conf: nil
// when it counts none (no status.ipam, or poolAction "taint", where the
// pool is the sidecar's). An error says why it cannot count the pool the
// entry names: "auto" finds no pool netready counts in the chain, or the
// object cannot be read as its source reads it (host-local's ranges).
// That is netready's own problem, which must never fail STATUS.
func countedPool(conf *config.NetConf) (json.RawMessage, error) {
	sc := conf.Status
	if sc == nil || len(sc.IPAM) == 0 || sc.PoolAction != config.PoolNotReady {
		return nil, nil
	}
	ipam, err := pool.Resolve(conf.Name, sc)
	if err != nil {
		return nil, err
	}
	if _, err := pool.New(conf.Name, ipam); err != nil {
		return nil, err
	}
	return ipam, nil
}

// uncountableMessage is the note of an entry whose pool STATUS cannot
// count: what the sidecar raises as NetreadyConfigInvalid.
func uncountableMessage(network string, err error) string {
	return fmt.Sprintf(`netready: network %q: STATUS cannot count the pool that "status.ipam" names, so it does not check it (poolAction "notready"); fix "status.ipam": %v`, network, err)
}

// keepNote leaves the note of an entry that ADD and STATUS accept: the
// message of a pool STATUS cannot count, or none. A note already there
// with the same message is left as it is, so that the sidecar raises it
// once.
func keepNote(conf *config.NetConf, uncountable error) error {
	if uncountable != nil {
		return notes.NoteInvalidConfig(conf.StateDir, conf.Name, uncountableMessage(conf.Name, uncountable))
	}
	return notes.ClearInvalidConfig(conf.StateDir, conf.Name)
}

// NoteEntry is what ADD leaves of an entry it accepted: the note of a pool
// that STATUS cannot count, as STATUS leaves it, or no note. ADD calls it
// instead of clearing the note, so that a pod's start does not clear what
// the next STATUS writes again, raising it anew each time.
func NoteEntry(conf *config.NetConf) error {
	_, err := countedPool(conf)
	return keepNote(conf, err)
}
