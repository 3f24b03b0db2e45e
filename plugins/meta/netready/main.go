// The runtime would re-read the cgroup's CPU limit in its first second to
// adjust GOMAXPROCS, which the plugin sets to 1 (package oneproc) and
// keeps for its short life.
//go:debug updatemaxprocs=0

// Command netready is a chained CNI plugin, last in a conflist, that holds
// ADD until the pod's network is programmed and records it in a marker.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
	bv "github.com/containernetworking/plugins/pkg/utils/buildversion"

	// One P before the other packages' inits run.
	_ "github.com/netready/netready/plugins/meta/netready/internal/oneproc"
)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Check:  cmdCheck,
		Del:    cmdDel,
		GC:     cmdGC,
		Status: cmdStatus,
	}, version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"), bv.BuildString("netready"))
}
