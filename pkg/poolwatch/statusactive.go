package poolwatch

import (
	"github.com/containernetworking/cni/pkg/version"

	"github.com/netready/netready/pkg/conflist"
)

// noteStatusActive sets netready_cni_status_active for the file the
// runtime uses: 1 when its cniVersion makes runtimes call STATUS and GC
// (1.1.0 and later), 0 when they never do, so that an operator sees that
// STATUS's verdicts (agents, pools with poolAction notready) cannot reach
// the node.
func (w *Watcher) noteStatusActive() {
	f, err := conflist.Pick(w.confDir, "")
	if err != nil {
		return
	}
	active, err := version.GreaterThanOrEqualTo(f.CNIVersion(), "1.1.0")
	v := 0.0
	if err == nil && active {
		v = 1
	}
	w.metrics.CNIStatusActive.Reset()
	w.metrics.CNIStatusActive.WithLabelValues(f.Network, f.CNIVersion()).Set(v)
}
