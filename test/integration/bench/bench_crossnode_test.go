//go:build integration

package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
)

// BenchmarkCrossNodeOVN: on two real OVN chassis (no lag), client pods on
// node A start one after another, ABAB with crossNode on and off. For the
// "on" pods: node B's catch-up (its Chassis_Private.nb_cfg_timestamp, when
// its ovn-controller had the flows for netready's barrier, less A's
// ovn-installed-ts: what OVN itself takes, plus netready's pacing of the
// raise, which the plugin logs as pacedMs); then how long after B's
// catch-up the wait ended (the goal's figure) and ADD returned, and where
// the time between went: the marker's write, up to "ADD done", then the
// plugin's exit and libcni. The catch-up and the log's times are in ms, on
// this one machine's clock. The "on" pods come about 130 ms apart here
// unpaced, so raiseInterval (200 ms) paces most. NETREADY_XN_DIAG=dir
// captures packets and diagnoses each failed first connection into dir
// (agents.CrossNodeBed.Diagnose).
func BenchmarkCrossNodeOVN(b *testing.B) {
	pods := 20
	if v, err := strconv.Atoi(os.Getenv("NETREADY_BENCH_ADDS")); err == nil {
		pods = min(max(v/2, 2), 50)
	}
	bed := agents.StartCrossNodeBed(b, "10.200.98.0/24", "10.200.98.2")
	on := bed.Chain(map[string]any{"timeout": "5s", "nbSocket": bed.OVN.NB, "sbSocket": bed.OVN.SB})
	off := bed.Chain(nil)
	diag := os.Getenv("NETREADY_XN_DIAG")
	if diag != "" {
		bed.Capture(diag)
	}
	var addOn, addOff, catchUp []time.Duration
	var onAdds []crossNodeAdd
	var offAdds []crossNodeAdd
	failed := map[bool]int{}
	for i := range 2 * pods {
		crossNode := i%2 == 0
		list := off
		if crossNode {
			list = on
		}
		ip := fmt.Sprintf("10.200.98.%d", 10+i)
		var counters map[string]int
		if diag != "" {
			counters = bed.Counters()
		}
		rt, took, err := bed.Add(list, fmt.Sprintf("p-%d", i), ip)
		returned := time.Now()
		if err != nil {
			b.Fatalf("ADD %d: %v", i, err)
		}
		if err := bed.Connect(rt); err != nil {
			failed[crossNode]++
			if diag != "" {
				fmt.Printf("pod %d (%s, crossNode %v): ADD returned %s, first connection failed at %s: %v; %s\n", i, ip, crossNode,
					returned.Format("15:04:05.000000"), time.Now().Format("15:04:05.000000"), err, bed.WriteDiagnosis(diag, rt, ip, counters))
			}
		}
		if !crossNode {
			addOff, offAdds = append(addOff, took), append(offAdds, crossNodeAdd{id: rt.ContainerID, returned: returned})
			continue
		}
		installed := msField(agents.OVSMapValue(bed.OVN.A.Vsctl("--columns=external_ids", "find", "Interface", "external_ids:sandbox="+rt.ContainerID), "ovn-installed-ts"))
		reached := msField(strings.TrimSpace(bed.OVN.Sbctl("--bare", "--columns=nb_cfg_timestamp", "find", "Chassis_Private", "name="+bed.OVN.B.Name)))
		if installed.IsZero() || reached.IsZero() {
			b.Fatalf("pod %d: no ovn-installed-ts (%v) or B's nb_cfg_timestamp (%v)", i, installed, reached)
		}
		addOn, catchUp = append(addOn, took), append(catchUp, reached.Sub(installed))
		onAdds = append(onAdds, crossNodeAdd{id: rt.ContainerID, returned: returned, reached: reached})
	}
	p := func(d []time.Duration) string {
		return fmt.Sprintf("p50 %s p99 %s", harness.Ms(harness.Percentile(d, .5)), harness.Ms(harness.Percentile(d, .99)))
	}
	logged := fromLog(b, bed.Log)
	var paced, waitOver, addOver, marker, exitOn, exitOff []time.Duration
	for _, a := range onAdds {
		l := logged[a.id]
		if l.waitEnd.IsZero() || l.done.IsZero() {
			b.Fatalf("ADD %s: no \"cross-node wait done\" or \"ADD done\" in the plugin's log", a.id)
		}
		paced = append(paced, l.paced)
		waitOver = append(waitOver, l.waitEnd.Sub(a.reached))
		addOver = append(addOver, a.returned.Sub(a.reached))
		marker = append(marker, l.done.Sub(l.waitEnd))
		exitOn = append(exitOn, a.returned.Sub(l.done))
	}
	for _, a := range offAdds {
		l := logged[a.id]
		if l.done.IsZero() {
			b.Fatalf("ADD %s: no \"ADD done\" in the plugin's log", a.id)
		}
		exitOff = append(exitOff, a.returned.Sub(l.done))
	}
	fmt.Printf("cross-node OVN (2 chassis, %d pods per arm, ABAB): ADD with crossNode %s, without %s; B's catch-up after A's ovn-installed %s, of which netready's pacing of its raise %s; "+
		"after B's catch-up (ms timestamps), the wait ended %s and ADD returned %s; from the wait's end to \"ADD done\" (the marker's write) %s; from \"ADD done\" to ADD's return (exit, libcni) %s with crossNode, %s without; first connections failed: %d with, %d without\n",
		pods, p(addOn), p(addOff), p(catchUp), p(paced), p(waitOver), p(addOver), p(marker), p(exitOn), p(exitOff), failed[true], failed[false])
}

// crossNodeAdd is one ADD as the bench saw it: when it returned and, with
// crossNode, when node B reached its barrier.
type crossNodeAdd struct {
	id       string
	returned time.Time
	reached  time.Time
}

// loggedAdd is one ADD as the plugin logged it.
type loggedAdd struct {
	paced   time.Duration // the wait to raise or join the barrier
	waitEnd time.Time     // "cross-node wait done"
	done    time.Time     // "ADD done"
}

// fromLog reads each ADD's times from the plugin's log lines (slog's text
// records: time in ms, then key=value pairs), by container ID.
func fromLog(b *testing.B, log string) map[string]loggedAdd {
	data, err := os.ReadFile(log)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]loggedAdd{}
	for _, l := range strings.Split(string(data), "\n") {
		f := logFields(l)
		t, err := time.Parse("2006-01-02T15:04:05.000Z07:00", f["time"])
		if f["containerID"] == "" || err != nil || f["verb"] != "ADD" {
			continue
		}
		a := out[f["containerID"]]
		switch f["msg"] {
		case "cross-node wait done":
			ms, err := strconv.Atoi(f["pacedMs"])
			if err != nil {
				b.Fatalf("pacedMs in %q: %v", l, err)
			}
			a.paced, a.waitEnd = time.Duration(ms)*time.Millisecond, t
		case "ADD done":
			a.done = t
		}
		out[f["containerID"]] = a
	}
	return out
}

// logFields splits one slog text record into its keys and values,
// unquoting quoted values, so that a key inside another's quoted value
// is never taken for a key.
func logFields(line string) map[string]string {
	out := map[string]string{}
	for rest := strings.TrimSpace(line); rest != ""; rest = strings.TrimLeft(rest, " ") {
		key, after, ok := strings.Cut(rest, "=")
		if !ok || strings.Contains(key, " ") {
			return out // not a record, or a cut one
		}
		var value string
		if q, err := strconv.QuotedPrefix(after); err == nil {
			value, _ = strconv.Unquote(q)
			rest = after[len(q):]
		} else {
			value, rest, _ = strings.Cut(after, " ")
		}
		out[key] = value
	}
	return out
}

// msField parses OVSDB's milliseconds since the epoch.
func msField(s string) time.Time {
	ms, err := strconv.ParseInt(strings.Trim(s, `"`), 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
