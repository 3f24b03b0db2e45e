package sidecar

import (
	"fmt"

	"k8s.io/client-go/dynamic"

	"github.com/netready/netready/pkg/pool/calico"
)

// calico watches Calico's IPAM objects. Only deploy/components/calico
// grants reading them: without it the source cannot tell, naming the
// component (calico.Watcher.Count), and nothing fails.
func (c *clusterSources) calico() (clusterSource, error) {
	dyn, err := dynamic.NewForConfig(c.cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return calico.New(calico.Options{Dynamic: dyn, Node: c.node, Log: c.log}), nil
}
