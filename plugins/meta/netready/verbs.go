package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/notes"
	"github.com/netready/netready/pkg/outcome"
	"github.com/netready/netready/pkg/statedir"
	"github.com/netready/netready/pkg/status"
	"github.com/netready/netready/pkg/wait"
)

// statusBudget keeps STATUS under the contract's one second.
const statusBudget = 900 * time.Millisecond

// checkBudget bounds CHECK's single look at the datapath.
const checkBudget = 5 * time.Second

func cmdAdd(args *skel.CmdArgs) error {
	start := time.Now()
	conf, err := config.Parse(args.StdinData)
	if err != nil {
		noteInvalidConfig(args, "ADD", err)
		return err
	}
	log := openLog(conf.LogFile, "ADD", args)
	if err := conf.ParsePrevResult(); err != nil {
		return logged(log, err)
	}
	att, err := newAttachment(conf, args)
	if err != nil {
		return logged(log, err)
	}

	env := checks.NewEnv(args.Netns)
	defer env.Close()
	if switchedOff(conf.StateDir) {
		return addWhileOff(conf, att, env, start, log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), conf.Timeout)
	defer cancel()
	results, waited, never := waitForChecks(ctx, conf, att, env, start, log)
	if conf.CrossNode != nil && conf.CrossNodeVia() == config.PresetOVNKubernetes && never == nil && unmetChecks(results) == "" {
		results, waited = append(results, waitCrossNode(conf, att, log)), time.Since(start)
	}
	if never != nil && (conf.OnTimeout == config.OnTimeoutFail || errors.Is(never, checks.ErrNetnsGone)) {
		return logged(log, types.NewError(types.ErrInternal, "netready: "+never.Error(), ""))
	}

	store := marker.Store{Dir: conf.StateDir}
	m := marker.New(att, results, waited, start)
	if unmet := unmetChecks(results); unmet != "" {
		if conf.OnTimeout == config.OnTimeoutFail {
			// A marker left by an earlier ADD must not claim readiness now.
			if err := store.Remove(markerKey(att)); err != nil {
				log.Warn("cannot remove old marker", "err", err)
			}
			// No marker tells of this wait, so the sidecar counts it
			// from the outcome journal.
			if err := journalTimeout(store, att, m.WaitedMs); err != nil {
				log.Warn("cannot record the timeout", "err", err)
			}
			return logged(log, types.NewError(types.ErrTryAgainLater,
				fmt.Sprintf("netready: timed out after %s waiting for: %s", waitLimit(conf, results), unmet), ""))
		}
		// proceed: the pod starts, its readiness waits. A check that can
		// never be met costs readiness, never the pod's start.
		m.State = marker.StatePending
		m.ReadyAt = nil
		m.Pending = pendingOf(conf, att)
	} else if conf.CrossNode != nil && conf.CrossNodeVia() == config.PresetCilium && att.Pod.Namespace != "" && att.Pod.Name != "" {
		// ADD cannot read the API server: the sidecar's re-check confirms
		// the CiliumEndpoint, and the pod is Ready only then. With no pod
		// named (not Kubernetes) there is none to confirm.
		m.Checks = append(m.Checks, ciliumLeftToSidecar(att.Pod))
		m.State, m.ReadyAt = marker.StatePending, nil
		m.Pending = pendingOf(conf, att)
	}
	if err := store.Write(m); err != nil {
		return logged(log, types.NewError(types.ErrIOFailure, "netready: "+err.Error()+": check that stateDir is writable", ""))
	}
	// Not a plain clear: STATUS notes a pool it cannot count again.
	if err := status.NoteEntry(conf); err != nil {
		log.Warn("cannot keep the note of the entry for the sidecar", "err", err)
	}
	log.Info("ADD done", "state", m.State, "waitedMs", m.WaitedMs, "unmet", unmetChecks(results))
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

// switchedOff reports whether the sidecar noted that netready is switched
// off (statedir.Off). A note that cannot be read counts as none: the
// ADD then waits as it would without the switch.
func switchedOff(stateDir string) bool {
	_, err := os.Lstat(filepath.Join(stateDir, statedir.Off))
	return err == nil
}

// addWhileOff is ADD while netready is switched off: no check is waited
// on, and the marker is pending, naming every check as not waited on. A
// marker never claims ready for checks nobody looked at: once the switch
// is off again, the sidecar's re-check of it decides, as for a timeout
// under proceed. The pod starts at once; the sidecar releases its gate.
func addWhileOff(conf *config.NetConf, att *attachment.Attachment, env *checks.Env, start time.Time, log *slog.Logger) error {
	// The marker's IPs are the sandbox's, as in every ADD: the sidecar
	// tells a pod's sandboxes apart by them.
	if err := checks.FillIPs(att, env); err != nil {
		log.Warn("netready is off: cannot read the pod's addresses", "err", err)
	}
	const why = "not waited on: netready is switched off (" + statedir.Off + ")"
	results := make([]marker.CheckResult, 0, len(conf.Checks))
	for _, cc := range conf.Checks {
		results = append(results, marker.CheckResult{Kind: cc.Kind, Target: "(netready off)", Why: why})
	}
	m := marker.New(att, results, time.Since(start), start)
	m.State, m.ReadyAt = marker.StatePending, nil
	m.Pending = pendingOf(conf, att)
	if err := (marker.Store{Dir: conf.StateDir}).Write(m); err != nil {
		// Off is for incidents: a stateDir that cannot be written must
		// not stop the pod's start.
		log.Warn("netready is off: cannot write the pending marker", "err", err)
	}
	log.Warn("ADD done without waiting: netready is switched off", "state", m.State, "stateDir", conf.StateDir)
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

// waitForChecks builds the attachment's checks and waits on them until
// ctx ends. It returns each check's result and how long the wait took; when
// a check can never be met (a build error, a NeverError), also that error,
// with the results naming it as unmet.
func waitForChecks(ctx context.Context, conf *config.NetConf, att *attachment.Attachment, env *checks.Env, start time.Time, log *slog.Logger) ([]marker.CheckResult, time.Duration, error) {
	neverMet := func(kind, target string, err error) ([]marker.CheckResult, time.Duration, error) {
		return []marker.CheckResult{{Kind: kind, Target: target, Why: err.Error()}}, time.Since(start), err
	}
	if err := checks.FillIPs(att, env); err != nil {
		return neverMet("address", att.IfName, err)
	}
	cs, err := checks.Build(conf.Checks, att, env)
	if err != nil {
		return neverMet("checks", "(configured)", err)
	}
	res, err := wait.Until(ctx, cs, wait.Options{Since: start, Logf: func(f string, a ...any) { log.Warn(fmt.Sprintf(f, a...)) }})
	return res.CheckResults(), res.Waited, err
}

// unmetChecks lists the unmet checks, each with its target and why, or "".
func unmetChecks(rs []marker.CheckResult) string {
	var parts []string
	for _, r := range rs {
		if r.Ready {
			continue
		}
		s := r.Kind + " " + r.Target
		if r.Why != "" {
			s += " (" + r.Why + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// journalTimeout appends a fail-mode timeout to the network's outcome
// journal.
func journalTimeout(store marker.Store, att *attachment.Attachment, waitedMs int64) error {
	path, err := store.Path(markerKey(att))
	if err != nil {
		return err
	}
	return outcome.Append(filepath.Dir(path), outcome.Record{ContainerID: att.ContainerID, IfName: att.IfName,
		Outcome: outcome.TimeoutFail, WaitedMs: waitedMs, At: time.Now().UTC()})
}

func cmdCheck(args *skel.CmdArgs) error {
	conf, err := config.Parse(args.StdinData)
	if err != nil {
		return err
	}
	log := openLog(conf.LogFile, "CHECK", args)
	if err := conf.ParsePrevResult(); err != nil {
		return logged(log, err)
	}
	att, err := newAttachment(conf, args)
	if err != nil {
		return logged(log, err)
	}
	env := checks.NewEnv(args.Netns)
	defer env.Close()
	// As ADD did: the marker records the interface's own addresses when
	// the result lists none.
	if err := checks.FillIPs(att, env); err != nil {
		return logged(log, types.NewError(types.ErrInternal, "netready: "+err.Error(), ""))
	}
	m, err := marker.Store{Dir: conf.StateDir}.Read(markerKey(att))
	if errors.Is(err, fs.ErrNotExist) {
		return logged(log, types.NewError(types.ErrInternal, "netready: no marker for this attachment: ADD did not complete through netready", ""))
	}
	if err != nil {
		return logged(log, types.NewError(types.ErrIOFailure, "netready: "+err.Error(), ""))
	}
	if err := markerMatches(m, att); err != nil {
		return logged(log, types.NewError(types.ErrInternal, "netready: marker does not match prevResult: "+err.Error(), ""))
	}
	// A pending marker is still being worked on by the sidecar; one that
	// waits only on its look at the CiliumEndpoint (forever, when the pod
	// is not gated) met every local check, which must still hold.
	if m.State == marker.StatePending && !m.OnlyUnmet(checks.KindCiliumPublished) {
		log.Info("CHECK done: the marker is pending; the sidecar is re-checking")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(conf.Timeout, checkBudget))
	defer cancel()
	if err := probeDatapath(ctx, conf.Checks, att, env); err != nil {
		return logged(log, types.NewError(types.ErrInternal, "netready: "+err.Error(), ""))
	}
	log.Info("CHECK done: the marker matches and address and route hold")
	return nil
}

// probeDatapath looks once at the address and route checks, which must hold
// for as long as the attachment lives.
func probeDatapath(ctx context.Context, confs []config.CheckConf, att *attachment.Attachment, env *checks.Env) error {
	var datapath []config.CheckConf
	for _, cc := range confs {
		if cc.Kind == config.KindAddress || cc.Kind == config.KindRoute {
			datapath = append(datapath, cc)
		}
	}
	cs, err := checks.Build(datapath, att, env)
	if err != nil {
		return err
	}
	for _, c := range cs {
		ready, why, err := c.Probe(ctx)
		if err != nil {
			return fmt.Errorf("check %s: %w", checks.Describe(c), err)
		}
		if !ready {
			return fmt.Errorf("check %s no longer holds: %s", checks.Describe(c), why)
		}
	}
	return nil
}

// cmdDel removes the marker. It never fails: a failing DEL would stop the
// runtime before the main plugin's DEL, leaking the pod's IP and veth.
// Problems are logged; a marker left behind is removed by GC.
func cmdDel(args *skel.CmdArgs) error {
	conf, problems := config.ParseCleanup(args.StdinData)
	log := openLog(conf.LogFile, "DEL", args)
	if problems != nil {
		log.Warn("the entry has problems; DEL removes the marker regardless", "err", problems)
	}
	if conf.Name == "" || conf.StateDir == "" {
		log.Info("DEL done: no usable name or stateDir, so ADD never wrote a marker with this entry")
		return nil
	}
	k := marker.Key{Network: conf.Name, ContainerID: args.ContainerID, IfName: args.IfName}
	if err := (marker.Store{Dir: conf.StateDir}).Remove(k); err != nil {
		log.Error("cannot remove the marker; GC will", "err", err)
		return nil
	}
	log.Info("DEL done")
	return nil
}

// cmdGC removes the markers of attachments the runtime no longer has. A
// problem in a key it does not read is logged, never returned; a keep-list
// that is missing, null or unreadable makes it remove nothing.
func cmdGC(args *skel.CmdArgs) error {
	conf, problems := config.ParseCleanup(args.StdinData)
	log := openLog(conf.LogFile, "GC", args)
	if problems != nil {
		log.Warn("the entry has problems; GC goes on with name and stateDir", "err", problems)
	}
	if conf.KeepListErr != nil {
		return logged(log, types.NewError(types.ErrDecodingFailure, "netready: GC removed nothing: "+conf.KeepListErr.Error(), ""))
	}
	if conf.Name == "" || conf.StateDir == "" {
		log.Info("GC done: no usable name or stateDir")
		return nil
	}
	if !conf.KeepListGiven {
		// A runtime with no sandboxes may send null; one that sends no
		// list at all has not said which attachments live either.
		log.Info("GC done: no cni.dev/valid-attachments list, so nothing is removed")
		return nil
	}
	keep := make([]marker.Key, 0, len(conf.ValidAttachments))
	for _, a := range conf.ValidAttachments {
		keep = append(keep, marker.Key{Network: conf.Name, ContainerID: a.ContainerID, IfName: a.IfName})
	}
	removed, err := marker.Store{Dir: conf.StateDir}.GC(conf.Name, keep, time.Now())
	log.Info("GC done", "kept", len(keep), "removed", removed)
	if err != nil {
		return logged(log, types.NewError(types.ErrIOFailure, "netready: "+err.Error(), ""))
	}
	return nil
}

// cmdStatus says whether this host can take ADDs. An entry that ADD would
// refuse does not fail it: a typo would take the node NotReady and every
// pod on it out of its Services, while ADD reports the entry (code 7) and
// the sidecar raises it from the note left here.
func cmdStatus(args *skel.CmdArgs) error {
	conf, err := config.Parse(args.StdinData)
	if err != nil {
		noteInvalidConfig(args, "STATUS", err)
		return nil
	}
	// status.Check keeps the note: it clears it, or notes a pool that it
	// cannot count.
	ctx, cancel := context.WithTimeout(context.Background(), statusBudget)
	defer cancel()
	if err := status.Check(ctx, conf); err != nil {
		log := openLog(conf.LogFile, "STATUS", args)
		return logged(log, types.NewError(types.ErrPluginNotAvailable,
			fmt.Sprintf("netready: network %q: %v", conf.Name, err), ""))
	}
	return nil
}

// noteInvalidConfig logs an entry that verb refused and leaves its message
// for the sidecar.
func noteInvalidConfig(args *skel.CmdArgs, verb string, err error) {
	c := config.ReadCleanup(args.StdinData)
	log := openLog(c.LogFile, verb, args)
	msg := fmt.Sprintf("netready: network %q: %s", c.Name, config.InvalidMessage(err))
	log.Error("the netready entry is invalid; ADD refuses it (code 7), STATUS stays green", "err", msg)
	if err := notes.NoteInvalidConfig(c.StateDir, c.Name, msg); err != nil {
		log.Warn("cannot leave the note of an invalid entry for the sidecar", "err", err)
	}
}

// newAttachment gathers who the attachment is; prevResult must be parsed.
func newAttachment(conf *config.NetConf, args *skel.CmdArgs) (*attachment.Attachment, error) {
	pod, err := attachment.ParsePod(args.Args)
	if err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "netready: "+err.Error(), "")
	}
	ips, err := attachment.PodIPs(conf.PrevResult, args.IfName)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "netready: "+err.Error(), "")
	}
	att := &attachment.Attachment{
		Network: conf.Name, ContainerID: args.ContainerID, IfName: args.IfName,
		NetNS: args.Netns, Pod: pod, IPs: ips,
	}
	if err := att.Validate(); err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "netready: "+err.Error(), "")
	}
	return att, nil
}

func markerKey(att *attachment.Attachment) marker.Key {
	return marker.Key{Network: att.Network, ContainerID: att.ContainerID, IfName: att.IfName}
}

// markerMatches compares a marker with the attachment CHECK was given.
func markerMatches(m *marker.Marker, att *attachment.Attachment) error {
	want := att.IPStrings()
	got := slices.Clone(m.IPs)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		return fmt.Errorf("marker has IPs %v, prevResult has %v", got, want)
	}
	return nil
}

// logged records a failure in the log file before it goes to the runtime.
func logged(log *slog.Logger, err error) error {
	log.Error("failed", "err", err)
	return err
}
