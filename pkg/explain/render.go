package explain

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText writes the report for a person.
func (r *PodReport) WriteText(w io.Writer) {
	fmt.Fprintln(w, r.Summary)
	if line := r.Off.Line(); line != "" {
		fmt.Fprintf(w, "  off:         %s\n", line)
	}
	if r.NoSidecar != "" {
		fmt.Fprintf(w, "  no sidecar:  %s\n", r.NoSidecar)
	}
	fmt.Fprintf(w, "  gate:        %s: %s\n", r.ConditionType, r.Gate.Source)
	if c := r.Condition; c != nil {
		fmt.Fprintf(w, "  condition:   %s, %s, since %s (%s ago)\n", c.Status, c.Reason, c.Since.UTC().Format("2006-01-02T15:04:05Z"), c.Age)
		if len(r.Attachments) == 0 {
			fmt.Fprintf(w, "  message:     %s\n", c.Message)
		}
	}
	for _, a := range r.Attachments {
		switch {
		case a.Programmed:
			fmt.Fprintf(w, "  network %s (%s): programmed %d ms after ADD began\n", a.Network, a.IfName, a.WaitedMs)
		default:
			fmt.Fprintf(w, "  network %s (%s): not programmed; unmet: %s\n", a.Network, a.IfName, a.Unmet)
			if a.Late != "" {
				fmt.Fprintf(w, "      %s\n", a.Late)
			}
		}
	}
	for _, e := range r.Events {
		if e.Reason == "FailedScheduling" {
			continue // below, once each
		}
		fmt.Fprintf(w, "  event:       %s %s (%s ago): %s\n", e.Type, e.Reason, e.Age, e.Note)
	}
	for _, s := range r.Scheduling {
		fmt.Fprintf(w, "  scheduling:  %s\n", s)
	}
	if n := r.NodeState; n != nil {
		writeNode(w, "node", n)
	}
	for i := range r.TaintedNodes {
		writeNode(w, "tainted", &r.TaintedNodes[i])
	}
	for _, u := range r.Unread {
		fmt.Fprintf(w, "  not read:    %s\n", u)
	}
}

func writeNode(w io.Writer, label string, n *NodeReport) {
	var parts []string
	if n.RuntimeNetworkReady {
		parts = append(parts, "runtime network ready")
	} else {
		parts = append(parts, "runtime network NOT ready: "+n.ReadyMessage)
	}
	if n.Tainted {
		parts = append(parts, "tainted netready.io/pod-ips-exhausted:NoSchedule")
	}
	if n.Pool != nil {
		parts = append(parts, fmt.Sprintf("NetworkPoolExhausted=%s: %s", n.Pool.Status, n.Pool.Message))
	}
	fmt.Fprintf(w, "  %-12s %s: %s\n", label+":", n.Node, strings.Join(parts, "; "))
	for _, p := range n.Pools {
		counted := ""
		if len(p.Ranges) > 0 {
			counted = fmt.Sprintf("%s (minFree %d): ", p.freeText(), p.MinFree)
		}
		fmt.Fprintf(w, "  pool:        %s on %s: %s%s\n", p.name(), n.Node, counted, p.stateText())
		if p.Do != "" {
			fmt.Fprintf(w, "  to do:       %s\n", p.Do)
		}
	}
	if p := n.Netready; p != nil {
		ready := "not ready"
		if p.Ready {
			ready = "ready"
		}
		fmt.Fprintf(w, "  netready:    pod %s (%s), %s, %s\n", p.Name, p.Version, p.Phase, ready)
	} else {
		fmt.Fprintf(w, "  netready:    no netready pod on %s: nothing publishes its pods' condition\n", n.Node)
	}
	for _, e := range n.Warnings {
		fmt.Fprintf(w, "  warning:     %s (%s ago): %s\n", e.Reason, e.Age, e.Note)
	}
}

// WriteNodesText writes one line per node, then one per pool the
// nodes' conditions name, then the sidecars' warnings.
func WriteNodesText(w io.Writer, nodes []NodeReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNETREADY\tVERSION\tREADY\tTAINTED\tWAITING\tOLDEST")
	for _, n := range nodes {
		pod, version, ready := "-", "-", "-"
		if p := n.Netready; p != nil {
			pod, version, ready = p.Name, p.Version, fmt.Sprint(p.Ready)
		}
		oldest := n.OldestWait
		if oldest == "" {
			oldest = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%d\t%s\n", n.Node, pod, version, ready, n.Tainted, n.Waiting, oldest)
	}
	_ = tw.Flush() // a closed stdout has no one to tell
	writePools(w, nodes)
	for _, n := range nodes {
		for _, e := range n.Warnings {
			fmt.Fprintf(w, "%s: %s (%s ago): %s\n", n.Node, e.Reason, e.Age, e.Note)
		}
	}
}

// writePools writes each node's pools as its NetworkPoolExhausted
// condition names them (the sidecar rewrites the counts each
// --pool-resync, and at once when a pool runs out or has room again).
func writePools(w io.Writer, nodes []NodeReport) {
	var rows []string
	for _, n := range nodes {
		for _, p := range n.Pools {
			minFree := "-"
			if p.MinFree > 0 {
				minFree = fmt.Sprint(p.MinFree)
			}
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, p.Network, p.Source, p.freeText(), minFree, p.stateText()))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNETWORK\tSOURCE\tFREE\tMINFREE\tPOOL")
	for _, r := range rows {
		fmt.Fprint(tw, r)
	}
	_ = tw.Flush()
}
