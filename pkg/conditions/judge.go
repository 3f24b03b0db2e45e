package conditions

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/publish"
)

// podView is what the controller knows of one pod besides the pod itself.
type podView struct {
	// Markers are the pod's readable markers, with re-check progress.
	Markers []*marker.Marker
	// Unreadable are the pod's markers that exist but cannot be read.
	Unreadable []publish.Unreadable
	// Strays are unreadable markers that name no known pod: any new
	// pod's, maybe.
	Strays []publish.Unreadable
	// NeverWrote holds, for those of Markers whose fresh checks say that
	// their preset's agent is not set up to write on a network that never
	// worked on this node, why.
	NeverWrote map[*marker.Marker]string
	// Memory is what earlier rounds left to remember of the pod; Lost
	// says it could not be read (or is gone while the pod's condition
	// says there was one), which judge takes as not ready. Inherited says
	// it was taken over from an older sidecar's condition (see
	// inheritedMemory), to be kept in a file from now on.
	Memory    memory
	Lost      bool
	Inherited bool
}

// judgeOptions are the controller's options that the judgement reads.
type judgeOptions struct {
	CondType        string
	PendingTimeout  time.Duration
	UnobservedGrace time.Duration
	UnobservedReady bool
	// Backoffs are the installer's standing backoffs, earliest first. A
	// pod whose sandbox came up after one began may have skipped
	// netready: with no marker, it is held not ready for at most HoldMax
	// after its sandbox came up, then judged as any unobserved pod.
	Backoffs []nodewriter.Backoff
	// HoldMax also bounds how long a pod whose pending markers all wait on
	// a preset that never wrote on this node (podView.NeverWrote) is held
	// after its ADD began: then it, too, is judged as an unobserved pod.
	HoldMax time.Duration
	// Off: netready is switched off (package offswitch). Every gated pod
	// that is not finished is True, reason NetreadyOff.
	Off bool
	// NoEndWait: the pod's memory cannot be kept, so awaitEnd's wait,
	// which counts from a time kept there, is not taken.
	NoEndWait bool
}

// judgement is the condition a pod should show, if it is time to say.
type judgement struct {
	Cond    corev1.PodCondition
	Publish bool
	// FromStrays: Cond comes from stray unreadable markers.
	FromStrays bool
	// After, when set, is when to judge the pod again (the end of its
	// unobserved grace, or of its hold).
	After time.Duration
	// Released is the backoff whose hold of the pod ran out, if Cond is
	// what the pod shows after it: its Event names the backoff.
	Released string
	// Remember, when set, is the pod's memory to keep before Cond is
	// published: a later round decides on it, never on Cond's message.
	Remember *memory
	// EndWait: the judgement is awaitEnd's wait, whose start is in
	// Remember; if that cannot be kept, every round would start it again.
	EndWait bool
}

// judge is the condition a gated pod should show: pure, from the pod, what
// the controller knows of it, and the time.
//
// A True is never kept for a sandbox that is gone. Markers of a sandbox
// older than the pod's current one do not count (staleMarkers), and a pod
// whose True was earned on markers that no longer count, or are gone, is
// False with reason SandboxChanged until a marker of its current sandbox,
// or the end of its unobserved grace, says otherwise. What a later round
// must know of that comes back in Remember, never in a message.
func judge(pod *corev1.Pod, v podView, o judgeOptions, now time.Time) judgement {
	if pod.Spec.HostNetwork {
		return judgement{Cond: publish.HostNetwork(o.CondType), Publish: true}
	}
	cur := publish.Current(pod, o.CondType)
	mem := v.Memory
	if v.Lost {
		mem = mem.withGone("", lostMarkers(v.Markers, cur))
	}
	// keep is the judgement j, with next as the memory to keep if it
	// differs from what is kept (a lost memory is written again).
	keep := func(j judgement, next memory) judgement {
		if v.Lost || v.Inherited || !next.equal(v.Memory) {
			j.Remember = &next
		}
		return j
	}
	current, stale := staleMarkers(pod, v.Markers, mem)
	var staleNames []string
	for _, m := range stale {
		staleNames = append(staleNames, markerName(m))
	}
	slices.Sort(staleNames)
	if o.Off && !finished(pod) {
		if cur != nil && cur.Status == corev1.ConditionTrue {
			// Not held: nothing to release, no write, no Event. One
			// released already is so on the markers it has now.
			next := mem
			if cur.Reason == publish.ReasonOff {
				next.Off, next.OffSandboxes = true, publish.SandboxIDs(current)
			}
			return keep(judgement{Cond: corev1.PodCondition{Type: cur.Type, Status: cur.Status, Reason: cur.Reason, Message: cur.Message}, Publish: true}, next)
		}
		next := mem
		next.Off, next.OffSandboxes = true, publish.SandboxIDs(current)
		return keep(judgement{Cond: publish.Off(o.CondType), Publish: true}, next)
	}
	if kept, next, ok := keptFromOff(cur, mem, current, o, now); ok {
		return keep(judgement{Cond: kept, Publish: true}, next)
	}
	if len(v.Unreadable) > 0 {
		var base *corev1.PodCondition
		if len(current) > 0 {
			cond := publish.ForMarkers(current, o.CondType, o.PendingTimeout, now)
			base = &cond
		}
		return keep(judgement{Cond: publish.WithUnreadable(base, v.Unreadable, o.CondType), Publish: true}, mem)
	}
	if len(current) > 0 {
		if wait := publishHold(current, cur, now); wait > 0 {
			// Unwritten, the gate holds the pod as a False would.
			return keep(judgement{After: wait}, mem)
		}
		j, next := notInEffect(current, v.NeverWrote, o, cur, mem, staleNames, now)
		return keep(j, next)
	}
	earned := cur != nil && cur.Status == corev1.ConditionTrue && cur.Reason == publish.ReasonProgrammed
	// What a True's end names as gone: its sandboxes, and the markers
	// left of older ones.
	ended := mem.withGone("", staleNames)
	for _, id := range strings.Split(mem.Judged, ",") {
		ended = ended.withGone(id, nil)
	}
	since, up := sandboxUp(pod)
	if earned && up && noSandboxAgain(pod) && !finished(pod) && !o.NoEndWait {
		j, next, ok := awaitEnd(ended, o.UnobservedGrace, now)
		if ok {
			return keep(j, next)
		}
		ended = next
	}
	var after time.Duration
	if up {
		if behind, wait := kubeletBehind(cur, mem.JudgedIPs, pod, since, now, o.UnobservedGrace); behind {
			after = wait
		} else if after = since.Add(o.UnobservedGrace).Sub(now); after <= 0 {
			// A marker that could never be read may be this pod's. A
			// pod already judged otherwise keeps its condition: one bad
			// file must not flip every running pod of the node.
			if len(v.Strays) > 0 && (cur == nil || cur.Reason == publish.ReasonMarkerUnreadable) {
				return keep(judgement{Cond: publish.WithUnreadable(nil, v.Strays, o.CondType), Publish: true, FromStrays: true}, mem)
			}
			next := mem.withGone("", staleNames)
			j := judgement{Cond: publish.LeftBehind(publish.NotObserved(o.CondType, o.UnobservedReady, o.UnobservedGrace), staleNames), Publish: true}
			if b, left := heldBy(o, cur, since, now); b != nil {
				if left > 0 {
					return keep(judgement{Cond: publish.LeftBehind(publish.NotObservedHeld(o.CondType, b.Msg), staleNames), Publish: true, After: left}, next)
				}
				j.Released = b.Msg
			}
			return keep(j, next)
		}
	}
	if earned && !finished(pod) {
		if after <= 0 {
			// Looked at again when kubelet has surely reported the sandbox.
			after = o.UnobservedGrace + time.Second
		}
		return keep(judgement{Cond: publish.SandboxChanged(o.CondType, mem.Judged, staleNames), Publish: true, After: after}, ended)
	}
	return keep(judgement{After: after}, mem)
}

// keptFromOff is the condition of a pod whose gate was released while
// netready was off, now that it is on again, with the memory to keep: the
// True it shows, while its markers are those it was released on (a pod
// released before its first ADD: its first sandbox's, which it adopts)
// and do not earn a True themselves. A True that has served is not taken
// back on a guess; a new sandbox is judged as any other.
func keptFromOff(cur *corev1.PodCondition, mem memory, current []*marker.Marker, o judgeOptions, now time.Time) (corev1.PodCondition, memory, bool) {
	ids := publish.SandboxIDs(current)
	if !mem.Off || cur == nil || cur.Reason != publish.ReasonOff || cur.Status != corev1.ConditionTrue ||
		(mem.OffSandboxes != ids && mem.OffSandboxes != "") {
		return corev1.PodCondition{}, mem, false
	}
	if len(current) > 0 && publish.ForMarkers(current, o.CondType, o.PendingTimeout, now).Status == corev1.ConditionTrue {
		return corev1.PodCondition{}, mem, false
	}
	next := mem
	next.OffSandboxes = ids
	return corev1.PodCondition{Type: cur.Type, Status: cur.Status, Reason: cur.Reason, Message: cur.Message}, next, true
}

// notInEffect is the judgement of a pod from its current markers, with the
// memory to keep. Where netready is not in effect, because every pending
// one waits on a preset whose agent never wrote on this node (neverWrote),
// nothing will ever tell: HoldMax after the last of their ADDs began, the
// pod is judged as one netready did not see, as --unobserved says. A pod
// judged so keeps it while the same sandbox's markers stay pending, also
// once the agent writes: a True that has served is not taken back on a
// guess, and the markers turning ready say the rest.
func notInEffect(current []*marker.Marker, neverWrote map[*marker.Marker]string, o judgeOptions, cur *corev1.PodCondition, mem memory, staleNames []string, now time.Time) (judgement, memory) {
	cond := publish.ForMarkers(current, o.CondType, o.PendingTimeout, now)
	judged := mem
	judged.Judged, judged.NotInEffect, judged.JudgedIPs, judged.EndSeen = publish.SandboxIDs(current), false, markerIPs(current), 0
	if cond.Status == corev1.ConditionTrue {
		return judgement{Cond: cond, Publish: true}, judged
	}
	if cur != nil && cur.Reason == publish.ReasonNotObserved && mem.NotInEffect && mem.Judged == judged.Judged {
		return judgement{Cond: corev1.PodCondition{Type: cur.Type, Status: cur.Status, Reason: cur.Reason, Message: cur.Message}, Publish: true}, mem
	}
	var networks []string
	var due time.Time
	for _, m := range current {
		if m.State != marker.StatePending {
			continue
		}
		if neverWrote[m] == "" {
			// A check that can tell: it decides.
			return judgement{Cond: cond, Publish: true}, judged
		}
		if !slices.Contains(networks, m.Network) {
			networks = append(networks, m.Network)
		}
		if t := m.CreatedAt.Add(o.HoldMax); t.After(due) {
			due = t
		}
	}
	if left := due.Sub(now); left > 0 {
		return judgement{Cond: cond, Publish: true, After: left}, judged
	}
	slices.Sort(networks)
	judged = judged.withGone("", staleNames)
	judged.NotInEffect = true
	return judgement{Cond: publish.LeftBehind(publish.NotInEffect(current, o.CondType, o.PendingTimeout, now, o.UnobservedReady, networks, o.HoldMax), staleNames), Publish: true}, judged
}

// heldBy returns the installer's backoff that holds a pod with no marker
// whose sandbox came up at since, and how long its hold has left (none
// left: it is released). Only a sandbox that came up after the backoff
// began may have skipped netready; the condition's time is in whole
// seconds, so one of the same second counts as after. A pod that shows
// True is never held: that would take a pod that may have served for
// days out of its Services on a note about something else.
func heldBy(o judgeOptions, cur *corev1.PodCondition, since, now time.Time) (*nodewriter.Backoff, time.Duration) {
	if o.HoldMax <= 0 || (cur != nil && cur.Status == corev1.ConditionTrue) {
		return nil, 0
	}
	for i := range o.Backoffs {
		if b := &o.Backoffs[i]; !since.Before(b.Since.Truncate(time.Second)) {
			return b, since.Add(o.HoldMax).Sub(now)
		}
	}
	return nil, 0
}

// markerName is a marker as conditions name it: <ShortID>_<ifName>.
func markerName(m *marker.Marker) string {
	return publish.ShortID(m.ContainerID) + "_" + m.IfName
}

// finished reports a pod that is going away or whose containers are done:
// it leaves its Services anyway, and a write for it buys nothing.
func finished(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// kubeletBehind says that a pod with no marker, whose sandbox kubelet
// reports up since since, may be one whose sandbox kubelet has not
// reported gone yet (its DEL often reaches the sidecar first), rather than
// a new sandbox that netready did not see. Time cannot tell them apart:
// kubelet reports a sandbox up only at the end of the sync that made it,
// image pulls included, so a sandbox may show up long after its True.
// So a True that a sandbox earned ends at once, unless kubelet shows pod
// IPs and none is the earning sandbox's (judgedIPs): then it shows
// another sandbox. The SandboxChanged False that ends it holds, while
// kubelet still shows a sandbox up no later than it was set, for at most
// grace after it (wait being what is left, bounded even if the clock
// stepped back): kubelet reports a gone sandbox within seconds, and no
// pod is held on a guess for longer.
func kubeletBehind(cur *corev1.PodCondition, judgedIPs []string, pod *corev1.Pod, since, now time.Time, grace time.Duration) (behind bool, wait time.Duration) {
	switch {
	case cur == nil:
		return false, 0
	case cur.Status == corev1.ConditionTrue && cur.Reason == publish.ReasonProgrammed:
		ips := podIPsOf(pod)
		return len(judgedIPs) == 0 || len(ips) == 0 || sharesAny(judgedIPs, ips), 0
	case cur.Reason == publish.ReasonSandboxChanged && !cur.LastTransitionTime.IsZero() && !since.After(cur.LastTransitionTime.Time) &&
		!cur.LastTransitionTime.After(now):
		// One set ahead of the clock (stepped back since) holds no more.
		wait = min(cur.LastTransitionTime.Add(grace+time.Second).Sub(now), grace+time.Second)
		return wait > 0, max(wait, 0)
	}
	return false, 0
}

// noSandboxAgain says kubelet should make no other sandbox for pod: with
// restartPolicy Never, once a container of it was created, a sandbox that
// goes ends the pod (kuberuntime's computePodActions). Its DEL is then its
// end, and the phase kubelet writes apart from it, often after it, is on
// its way: a SandboxChanged there would be a False and a Warning Event on
// every Job pod that finishes. restartPolicy is the tenant's, and kubelet
// judges on the runtime's containers, not the API's, so this only delays
// the end of the True (awaitEnd), never keeps it.
func noSandboxAgain(pod *corev1.Pod) bool {
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		return false
	}
	created := func(s corev1.ContainerStatus) bool {
		return s.ContainerID != "" || s.State.Running != nil || s.State.Terminated != nil
	}
	return slices.ContainsFunc(pod.Status.InitContainerStatuses, created) || slices.ContainsFunc(pod.Status.ContainerStatuses, created)
}

// awaitEnd is the judgement of a noSandboxAgain pod whose True has lost its
// markers while kubelet still shows its sandbox up (kubelet reports the
// sandbox down and the phase together): no write for up to grace after
// the first round that saw it (kept in next.EndSeen), for kubelet's phase
// to finish it; ok false once that is over, and the True ends as any other.
func awaitEnd(next memory, grace time.Duration, now time.Time) (j judgement, _ memory, ok bool) {
	if next.EndSeen == 0 || next.EndSeen > now.Unix() {
		// First seen now; a time ahead of the clock is a clock stepped back.
		next.EndSeen = now.Unix()
	}
	left := time.Unix(next.EndSeen, 0).Add(grace + time.Second).Sub(now)
	if left <= 0 {
		return judgement{}, next, false
	}
	return judgement{After: left, EndWait: true}, next, true
}

// sandboxUp reports whether the pod's sandbox is up and since when, as
// best known: PodReadyToStartContainers when kubelet reports it (it turns
// False while a sandbox is recreated, when the old IP may still show),
// else an IP. A terminating pod is never judged: DEL removed its markers.
func sandboxUp(pod *corev1.Pod) (time.Time, bool) {
	if pod.DeletionTimestamp != nil {
		return time.Time{}, false
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReadyToStartContainers {
			return cond.LastTransitionTime.Time, cond.Status == corev1.ConditionTrue
		}
	}
	if pod.Status.PodIP == "" {
		return time.Time{}, false
	}
	if pod.Status.StartTime != nil {
		return pod.Status.StartTime.Time, true
	}
	return pod.CreationTimestamp.Time, true
}

// sidecarPartHold is how long after ADD a pod with no condition yet is left
// without one while its markers wait only on the sidecar's confirmation of
// the CiliumEndpoint (crossNode with Cilium), which takes a few ms: one
// True then, not a False and a True, is the one write per pod start. A
// pod still waiting after it shows False with the reason. crossNode's
// "settle" adds to it, for the same reason.
const sidecarPartHold = 2 * time.Second

// publishHold is how long the pod may still go without a condition (see
// sidecarPartHold), or 0.
func publishHold(current []*marker.Marker, cur *corev1.PodCondition, now time.Time) time.Duration {
	if cur != nil {
		return 0
	}
	var left time.Duration
	for _, m := range current {
		switch {
		case m.State == marker.StateReady:
		case m.OnlyUnmet(checks.KindCiliumPublished):
			hold := sidecarPartHold
			if m.Pending != nil {
				hold += time.Duration(min(m.Pending.CiliumSettleMs, config.MaxSettle.Milliseconds())) * time.Millisecond
			}
			// Bounded: a clock stepped back must not hold the False longer.
			left = max(left, min(m.CreatedAt.Add(hold).Sub(now), hold))
		default:
			return 0
		}
	}
	return max(left, 0)
}
