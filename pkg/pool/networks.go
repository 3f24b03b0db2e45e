package pool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/conflist"
)

// Network is a network whose netready entry asks for its pool to be
// watched (status.ipam).
type Network struct {
	// Network is the network's name.
	Network string
	// Spec is host-local's pool; nil when an agent answers for it.
	*Spec
	// Source reads the pool: the Spec, or the agent.
	Source  Source
	MinFree int
	// Action is the entry's status.poolAction.
	Action string
	// File is the config file the entry was read from: the network's
	// config file, or a file in its plugin folder.
	File string
	// StateDir is the entry's stateDir, where STATUS looks for a kept
	// count of the pool (CachePath).
	StateDir string
}

// Networks reads every CNI config file in confDir, in the runtime's order,
// and returns the networks whose netready entry names a pool; the first
// valid file of each network wins, as for the runtime. Files and entries
// that are not valid come back as problems; they never hide the valid ones. err is set
// only when the folder cannot be read at all.
//
// Networks leaves out the pools an agent answers for; AllNetworks has
// them too.
func Networks(confDir string) (nets []Network, problems, err error) {
	all, problems, err := AllNetworks(confDir)
	for _, n := range all {
		if n.Origin() == Folder {
			nets = append(nets, n)
		}
	}
	return nets, problems, err
}

// AllNetworks is Networks with the pools that an agent answers for
// (Cilium's, ipamd's): their Spec is nil.
func AllNetworks(confDir string) (nets []Network, problems, err error) {
	entries, err := os.ReadDir(confDir)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", confDir, err)
	}
	var (
		out  []Network
		errs []error
		seen = map[string]bool{}
	)
	for _, e := range entries {
		if e.IsDir() || !conflist.IsConfigName(e.Name()) {
			continue
		}
		f, err := conflist.Load(filepath.Join(confDir, e.Name()))
		if err != nil {
			// Perhaps a vendor's file caught mid-write: it may be a
			// watched network's, so it is a problem, not nothing.
			errs = append(errs, err)
			continue
		}
		if seen[f.Network] {
			continue // the runtime uses the earlier file
		}
		seen[f.Network] = true
		n, err := networkOf(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.Path, err))
		}
		if n != nil {
			out = append(out, *n)
		}
	}
	return out, errors.Join(errs...), nil
}

// Origin is where the network's count comes from.
func (n Network) Origin() Origin { return OriginOf(n.Source) }

// networkOf reads the netready entry of the file's chain as the plugin
// would; nil when it has none or the entry names no pool.
func networkOf(f *conflist.File) (*Network, error) {
	entry, file, err := f.ChainEntry()
	if entry == nil || err != nil {
		return nil, err
	}
	merged, err := f.Merged(entry)
	if err != nil {
		return nil, err
	}
	conf, err := config.Parse(merged)
	if err != nil && file != f.Path {
		return nil, fmt.Errorf("%s (netready's entry of this network): %w", file, err)
	}
	if err != nil {
		return nil, err
	}
	sc := conf.Status
	if sc == nil || len(sc.IPAM) == 0 {
		return nil, nil
	}
	ipam := sc.IPAM
	if sc.IPAMAuto() {
		// This very file is the network's: no second look in confDir,
		// which may be mounted elsewhere in the sidecar's container.
		if ipam, err = AutoIPAM(f); err != nil {
			return nil, err
		}
	}
	src, err := New(f.Network, ipam)
	if err != nil {
		return nil, err
	}
	src = atStateDir(src, conf.StateDir)
	spec, _ := src.(*Spec)
	return &Network{Network: f.Network, Spec: spec, Source: src, MinFree: *sc.MinFree, Action: sc.PoolAction, File: file, StateDir: conf.StateDir}, nil
}
