// Command netready is a chained CNI plugin, last in a conflist, that holds
// ADD until the pod's network is programmed and records it in a marker.
package main

import (
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
	bv "github.com/containernetworking/plugins/pkg/utils/buildversion"
)

func main() {
	// One P: the plugin waits, it does not compute. With two, each wake
	// (a notification, a poll's answer) also woke a second thread to look
	// for work, which cost a storm of waiting ADDs a share of their CPU
	// (docs/benchmarks.md).
	runtime.GOMAXPROCS(1)
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Check:  cmdCheck,
		Del:    cmdDel,
		GC:     cmdGC,
		Status: cmdStatus,
	}, version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"), bv.BuildString("netready"))
}
