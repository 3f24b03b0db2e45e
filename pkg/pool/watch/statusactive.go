package watch

import (
	"github.com/containernetworking/cni/pkg/version"

	"github.com/netready/netready/pkg/conflist"
	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/nodewriter"
)

// noteStatusActive sets netready_cni_status_active for the file the
// runtime uses: 1 when its cniVersion makes runtimes call STATUS and GC
// (1.1.0 and later), 0 when they never do, so that an operator sees that
// STATUS's verdicts (agents, pools with poolAction notready) cannot reach
// the node. A 0 is also a Warning Node Event, once per file and version
// (and again after kubeapi.RepeatWarningAfter while it holds), which
// kubectl netready status shows.
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
	key := f.Path + " " + f.CNIVersion()
	now := w.now()
	repeat := key == w.statusInactive && now.Sub(w.statusInactiveAt) >= kubeapi.RepeatWarningAfter
	if v == 1 || (key == w.statusInactive && !repeat) || !w.nodes.Warns() {
		if v == 1 {
			w.statusInactive = ""
		}
		return
	}
	w.statusInactive, w.statusInactiveAt = key, now
	w.nodes.Warn(nodewriter.ReasonStatusInactive, "Check",
		"network %s: %s says cniVersion %s, and runtimes call STATUS and GC only at 1.1.0 or later: netready's STATUS verdicts and GC never run on this node. Run netready-install with --cni-version auto to raise it where every plugin of the chain supports 1.1.0",
		f.Network, f.Path, f.CNIVersion())
}
