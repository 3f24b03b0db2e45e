package main

import (
	"fmt"

	"github.com/netready/netready/pkg/explain"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
)

// problems names what on node n asks the operator to act: what status's
// exit code 1 means. Pods that wait are no problem by themselves (each
// waits for its network); pods that wait where no netready pod runs are,
// since nothing publishes their condition.
func problems(n explain.NodeReport) []string {
	var out []string
	if !n.RuntimeNetworkReady {
		out = append(out, "the runtime's network is not ready: "+n.ReadyMessage)
	}
	if n.Tainted {
		out = append(out, "tainted "+nodewriter.Key+":NoSchedule")
	}
	for _, p := range n.Pools {
		switch p.State {
		case pool.StateExhausted:
			out = append(out, fmt.Sprintf("pool %s (%s) is exhausted", p.Network, p.Source))
		case pool.StateUnknown:
			out = append(out, fmt.Sprintf("pool %s (%s) can't tell: %s", p.Network, p.Source, p.Why))
		}
	}
	switch p := n.Netready; {
	case p == nil && n.Waiting > 0:
		out = append(out, fmt.Sprintf("no netready pod, and %d gated pods wait", n.Waiting))
	case p != nil && !p.Ready:
		out = append(out, fmt.Sprintf("netready pod %s is not ready (%s)", p.Name, p.Phase))
	}
	for _, e := range n.Warnings {
		out = append(out, "warning "+e.Reason)
	}
	return out
}
