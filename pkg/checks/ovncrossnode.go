package checks

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/ovsdb"
	"github.com/netready/netready/pkg/statedir"
)

// KindOVNCrossNode names the cross-node wait's result in the marker.
const KindOVNCrossNode = "ovn-cross-node"

// OVN's own barrier (ovn-nbctl --wait=hv works the same way): a client
// raises NB_Global.nb_cfg; ovn-northd copies it into the SB; each
// ovn-controller, once the flows for everything in the SB up to that
// value are installed, writes it into its Chassis_Private.nb_cfg. So a
// chassis whose nb_cfg reached a value raised after this pod's own node
// had claimed its port (ovn-installed) has the port's binding and every
// NB change made before it, such as the pod's IP in a policy's address
// set. NB_Global.hv_cfg is the minimum over all chassis, so one frozen
// chassis would hold it for every pod: netready reads each chassis'
// Chassis_Private instead and leaves a stalled one out, naming it.

// CrossNode is the outcome of one cross-node wait.
type CrossNode struct {
	Ready bool
	// Target says what was waited for, and which chassis were left out.
	Target string
	// Why it is not ready.
	Why string
	// Note, once ready, says what the ready rests on, for the condition.
	Note string
	// Bumped: this wait raised nb_cfg itself (false: it joined a raise
	// made after it had read the value, which serves it as well).
	Bumped bool
	// Paced is how long it waited to raise or join, after its claim was
	// seen (ovnbarrier.go).
	Paced time.Duration
	// LeftOut names each stalled chassis with its nb_cfg, and Waiting
	// each one still awaited: in full, for the log; Target and Why name
	// a few.
	LeftOut []string
	Waiting []string
	Waited  time.Duration
}

// crossNodeSafety re-reads the chassis from the SB when no monitor update
// came, for an update the stream might have lost; crossNodePoll paces the
// retries of an unreachable database.
const (
	crossNodeSafety = time.Second
	crossNodePoll   = 50 * time.Millisecond
)

// behindFile remembers, per node, since when each chassis has been behind
// a barrier, so that a chassis found stalled by one ADD is left out at once
// by the next, not after another stallAfter. It has no marker suffix, so
// the marker GC leaves it alone; losing it costs only a wait.
const behindFile = statedir.ChassisBehind

// behind is one chassis that had not reached Target at Since (this node's
// clock: only this node's ADDs read and write the file).
type behind struct {
	Target int64     `json:"target"`
	Since  time.Time `json:"since"`
}

// WaitOVNCrossNode runs once the pod's own node has installed its port:
// it raises nb_cfg (or joins a raise made after its claim was in the SB),
// paced by cn.RaiseInterval, then
// waits, woken by an OVSDB monitor of the SB's Chassis_Private, until every
// chassis has reached it or is stalled: behind a barrier older than
// cn.StallAfter. memoDir holds behindFile. It ends by ctx's deadline.
func WaitOVNCrossNode(ctx context.Context, cn *config.CrossNodeConf, ifaceID, memoDir string) CrossNode {
	start := time.Now()
	out := CrossNode{Target: "every chassis' Chassis_Private.nb_cfg at netready's barrier"}
	// last is the last reading of the chassis: its full lists are built
	// once, at the end, not on every reading.
	var last verdict
	done := func() CrossNode {
		out.Waited, out.LeftOut, out.Waiting = time.Since(start), inFull(last.stalled), inFull(last.waiting)
		return out
	}
	if ifaceID == "" {
		// Without the port's name its claim cannot be awaited, and a
		// barrier raised before the claim would prove nothing.
		out.Why = "no pod namespace and name in CNI_ARGS, so the pod's OVN port (and its claim in the SB) cannot be told"
		return done()
	}
	// The mirror opens before the barrier, so no chassis' answer to it
	// can slip by unseen; reading it costs no request to the SB. Its
	// stream ends with this wait.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mirror, err := ovsdb.MirrorTable(ctx, cn.SBSocket, "OVN_Southbound", "Chassis_Private", chassisColumns)
	if err != nil {
		mirror = nil // polled instead
	}
	// ovn-controller sets ovn-installed once the flows are in, while its
	// SB write of the port's claim may still be in flight; Port_Binding.up
	// comes in a later transaction of the same client, so once it reads
	// true the claim is in the SB, and the barrier cannot overtake it.
	if err := awaitPortUp(ctx, cn.SBSocket, ifaceID); err != nil {
		out.Why = err.Error()
		return done()
	}
	target, bumped, paced, err := barrier(ctx, cn.NBSocket, cn.RaiseInterval)
	if err != nil {
		out.Why = err.Error()
		return done()
	}
	raisedAt := time.Now()
	out.Bumped, out.Paced = bumped, paced
	memoPath := filepath.Join(memoDir, behindFile)
	memo := readBehind(memoPath)
	learned := memo
	defer func() { writeBehind(memoPath, learned, memo) }()
	interval := crossNodeSafety
	if mirror == nil {
		interval = crossNodePoll
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	// fromMirror: the mirror's rows are as new as the SB's; a wake by the
	// timer reads the SB itself, for an update the stream might have lost.
	fromMirror := mirror != nil
	for {
		rows, err := readChassis(ctx, cn.SBSocket, mirror, fromMirror)
		next := crossNodePoll
		if err == nil {
			v := judge(rows, target, raisedAt, time.Now(), cn.StallAfter, memo)
			learned, last = v.memo, v
			out.Target = v.target(target)
			if v.met() {
				out.Ready, out.Why, out.Note = true, "", "the other nodes' ovn-controllers have programmed it (OVN's barrier)"
				return done()
			}
			out.Why = v.why(target)
			next = interval
			if v.nextStall > 0 {
				next = min(interval, v.nextStall)
			}
		} else if ctx.Err() == nil || out.Why == "" {
			// A read the deadline cut short says only that; the one
			// before it says who is behind.
			out.Why = err.Error()
		}
		timer.Reset(next)
		var changed <-chan struct{}
		if mirror != nil {
			changed = mirror.Changed()
		}
		select {
		case <-ctx.Done():
			out.Why += fmt.Sprintf(" (a chassis is left out once behind for crossNode.stallAfter %s)", cn.StallAfter)
			return done()
		case _, ok := <-changed:
			fromMirror = ok
			if !ok {
				mirror, interval = nil, crossNodePoll
			}
		case <-timer.C:
			fromMirror = false
		}
	}
}

// chassisColumns are the Chassis_Private columns the wait judges.
var chassisColumns = []string{"name", "nb_cfg", "chassis"}

// readChassis is every chassis' row: the mirror's when fromMirror and it
// still follows the table, else read from the SB.
func readChassis(ctx context.Context, socket string, mirror *ovsdb.Mirror, fromMirror bool) ([]ovsdb.Row, error) {
	if fromMirror && mirror != nil {
		if rows, ok := mirror.Rows(); ok {
			return rows, nil
		}
	}
	return ovsdb.Select(ctx, socket, "OVN_Southbound", "Chassis_Private", []any{}, chassisColumns)
}

// awaitPortUp waits, woken by a monitor of the SB's Port_Binding table,
// until the port's binding has a chassis and up=true.
func awaitPortUp(ctx context.Context, socket, ifaceID string) error {
	// The monitor hears every port's changes: it ends with this wait,
	// not with the cross-node wait's.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates, err := ovsdb.Monitor(ctx, socket, "OVN_Southbound", "Port_Binding", []string{"up", "chassis"})
	if err != nil {
		updates = nil // polled instead
	}
	why := "no Port_Binding " + ifaceID + " in the SB yet"
	interval := crossNodeSafety
	if updates == nil {
		interval = crossNodePoll
	}
	for {
		rows, err := ovsdb.Select(ctx, socket, "OVN_Southbound", "Port_Binding",
			[]any{[]any{"logical_port", "==", ifaceID}}, []string{"up", "chassis"})
		switch {
		case err != nil && ctx.Err() == nil:
			why = err.Error()
		case len(rows) == 1 && !isEmptySet(rows[0]["chassis"]) && strings.Contains(string(rows[0]["up"]), "true"):
			return nil
		case len(rows) == 1:
			why = fmt.Sprintf("Port_Binding %s: its claim is not in the SB yet (chassis %s, up %s)", ifaceID, rows[0]["chassis"], rows[0]["up"])
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("before netready's barrier: %s", why)
		case _, ok := <-updates:
			if !ok {
				updates, interval = nil, crossNodePoll
			}
		case <-time.After(interval):
		}
	}
}

// verdict is one reading of the chassis against the barrier.
type verdict struct {
	reached int
	waiting []lagging // chassis still awaited
	stalled []lagging // left out
	// nextStall is how long until the first awaited chassis counts as
	// stalled; 0 when none is awaited.
	nextStall time.Duration
	memo      map[string]behind
}

// met: no chassis is awaited, and at least one reached the barrier. When
// none did (every chassis left out, or none listed), the barrier itself
// is not moving, ovn-northd down say: that cannot tell, so it is not ready.
func (v verdict) met() bool { return len(v.waiting) == 0 && v.reached > 0 }

// why says what met is waiting for.
func (v verdict) why(target int64) string {
	if len(v.waiting) > 0 {
		return fmt.Sprintf("not yet at nb_cfg %d: %s", target, someChassis(v.waiting))
	}
	return fmt.Sprintf("no chassis has reached nb_cfg %d, this node's included, so the barrier is not moving: see that ovn-northd runs and the SB is writable", target)
}

func (v verdict) target(target int64) string {
	s := fmt.Sprintf("Chassis_Private.nb_cfg >= %d on %d of %d chassis", target, v.reached, v.reached+len(v.waiting)+len(v.stalled))
	if len(v.stalled) > 0 {
		s += "; left out, stalled: " + someChassis(v.stalled)
	}
	return s
}

// lagging is a chassis behind the barrier: its name, and how far behind
// ("nb_cfg 5", or "nb_cfg 5, behind for 3.1s").
type lagging struct{ name, state string }

// String is the chassis in full, for the log.
func (c lagging) String() string { return c.name + " (" + c.state + ")" }

// namedChassis is how many chassis a reason or target names, each name cut
// to namedChassisBytes: the pod's condition message holds every
// attachment's in 1,024 characters, and with hundreds of nodes behind (or
// long host names) a full list would crowd the others out.
const (
	namedChassis      = 5
	namedChassisBytes = 40
)

// someChassis names the first namedChassis of cs, and counts the rest.
func someChassis(cs []lagging) string {
	var parts []string
	for _, c := range cs[:min(len(cs), namedChassis)] {
		if len(c.name) > namedChassisBytes {
			c.name = strings.ToValidUTF8(c.name[:namedChassisBytes-3], "") + "..."
		}
		parts = append(parts, c.String())
	}
	s := strings.Join(parts, ", ")
	if more := len(cs) - len(parts); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// inFull is each of cs in full.
func inFull(cs []lagging) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

// judge sorts the chassis: reached the barrier, awaited, or stalled: behind
// a barrier raised more than stallAfter ago, by this wait (raisedAt) or by
// an earlier one on this node (memo). Rows without a Chassis are chassis
// being removed, and count for nothing.
func judge(rows []ovsdb.Row, target int64, raisedAt, now time.Time, stallAfter time.Duration, memo map[string]behind) verdict {
	v := verdict{memo: map[string]behind{}}
	slices.SortFunc(rows, func(a, b ovsdb.Row) int { return strings.Compare(string(a["name"]), string(b["name"])) })
	for _, r := range rows {
		var name string
		if json.Unmarshal(r["name"], &name) != nil || name == "" || isEmptySet(r["chassis"]) {
			continue
		}
		cfg, _ := ovsdb.Int(r["nb_cfg"])
		if cfg >= target {
			v.reached++
			continue
		}
		// Still behind the older barrier an earlier ADD noted: behind
		// since then.
		note, ok := memo[name]
		if !ok || cfg >= note.Target || !note.Since.Before(raisedAt) {
			note = behind{Target: target, Since: raisedAt}
		}
		v.memo[name] = note
		since := note.Since
		lag := now.Sub(since)
		if lag >= stallAfter {
			v.stalled = append(v.stalled, lagging{name, fmt.Sprintf("nb_cfg %d, behind for %s", cfg, lag.Round(time.Millisecond))})
			continue
		}
		v.waiting = append(v.waiting, lagging{name, fmt.Sprintf("nb_cfg %d", cfg)})
		if left := stallAfter - lag; v.nextStall == 0 || left < v.nextStall {
			v.nextStall = left
		}
	}
	return v
}

// isEmptySet reports an OVSDB optional column that holds nothing.
func isEmptySet(col json.RawMessage) bool {
	return len(col) == 0 || strings.ReplaceAll(string(col), " ", "") == `["set",[]]`
}

func readBehind(path string) map[string]behind {
	m := map[string]behind{}
	if data, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(data, &m) // unreadable: start afresh
	}
	return m
}

// writeBehind stores what this wait learned, if it differs from what it
// read. Parallel ADDs may overwrite each other; the loser's note comes
// back with the next ADD that finds the chassis behind.
func writeBehind(path string, now, was map[string]behind) {
	if mapsEqual(now, was) {
		return
	}
	data, err := json.Marshal(now)
	if err != nil {
		return
	}
	// The network's folder may not exist before its first marker.
	if os.MkdirAll(filepath.Dir(path), 0o755) == nil {
		_ = atomicfile.Write(path, data, 0o644)
	}
}

func mapsEqual(a, b map[string]behind) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w.Target != v.Target || !w.Since.Equal(v.Since) {
			return false
		}
	}
	return true
}
