// Package publish owns what the sidecar says about one pod: the readiness
// condition computed from all of the pod's markers (or from the pod itself
// when netready never saw it), the Event that goes with a change, and the
// strategic-merge patch of pods/status that sets the condition, guarded by
// the pod's UID so that a recreated pod of the same name is never patched.
package publish

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/marker"
)

// DefaultConditionType is the well-known name KEP-5709 proposes.
const DefaultConditionType = "networking.kubernetes.io/pod-network-ready"

// Reasons of the condition, which are also the reasons of its Events.
const (
	ReasonProgrammed    = "NetworkProgrammed"
	ReasonNotProgrammed = "NetworkNotProgrammed"
	ReasonHostNetwork   = "HostNetwork"
	ReasonNotObserved   = "NotObserved"
	// ReasonMarkerUnreadable: a marker file exists but cannot be read
	// (an I/O error, too many open files, an unknown version). It may say
	// "pending", so the pod is kept not ready until it can be read.
	ReasonMarkerUnreadable = "MarkerUnreadable"
	// ReasonSandboxChanged: the sandbox whose network earned the pod its
	// True is gone (its marker was removed, or the pod's sandbox changed
	// after it), and no marker of a newer sandbox says anything yet.
	ReasonSandboxChanged = "SandboxChanged"
	// ReasonOff: netready is switched off (the netready-off ConfigMap,
	// kubectl netready off): the gate is released whatever the markers
	// say.
	ReasonOff = "NetreadyOff"
)

// ReasonPublishRefused is the reason of the Warning Event on a pod whose
// condition patch the API server refused for good (a policy, RBAC, an
// invalid patch). It is never a reason of the condition.
const ReasonPublishRefused = "PublishRefused"

// maxMessage keeps the condition message readable in kubectl.
const maxMessage = 1024

// ForMarkers is the condition for a pod with these markers: True only when
// every one is ready. The message names each attachment. A marker pending
// for longer than patience says so, as a stable text, so that the
// condition does not change on every re-check.
func ForMarkers(ms []*marker.Marker, condType string, patience time.Duration, now time.Time) corev1.PodCondition {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b *marker.Marker) int {
		return cmp.Or(strings.Compare(a.Network, b.Network), strings.Compare(a.IfName, b.IfName))
	})
	c := corev1.PodCondition{Type: corev1.PodConditionType(condType), Status: corev1.ConditionTrue, Reason: ReasonProgrammed}
	// The sandbox judged comes first: a reader can tell a True of an
	// older sandbox from one of the pod's own.
	var parts []string
	if ids := SandboxIDs(ms); ids != "" {
		parts = []string{"sandbox " + ids}
	}
	for _, m := range ms {
		name := fmt.Sprintf("network %s (%s)", m.Network, m.IfName)
		if m.State == marker.StateReady {
			parts = append(parts, fmt.Sprintf("%s programmed after %d ms%s", name, m.WaitedMs, restsOn(m)))
			continue
		}
		c.Status, c.Reason = corev1.ConditionFalse, ReasonNotProgrammed
		late := ""
		if now.Sub(m.CreatedAt.Time) > patience {
			late = fmt.Sprintf(" still not programmed more than %s after ADD (%s), re-checking at least every minute;",
				patience, m.CreatedAt.UTC().Format(time.RFC3339))
		}
		parts = append(parts, fmt.Sprintf("%s:%s waiting for: %s", name, late, Unmet(m)))
	}
	c.Message = truncate(strings.Join(parts, "; "))
	return c
}

// SandboxIDs names the sandboxes of ms as ForMarkers does: their ShortIDs,
// comma-separated, in the order of ms sorted by network and interface.
func SandboxIDs(ms []*marker.Marker) string {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b *marker.Marker) int {
		return cmp.Or(strings.Compare(a.Network, b.Network), strings.Compare(a.IfName, b.IfName))
	})
	var sandboxes []string
	for _, m := range ms {
		if id := ShortID(m.ContainerID); id != "" && !slices.Contains(sandboxes, id) {
			sandboxes = append(sandboxes, id)
		}
	}
	return strings.Join(sandboxes, ",")
}

// ShortID is a sandbox (container) ID as the condition names it: its first
// twelve characters, as crictl and docker print them.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// SandboxChanged is the condition of a pod whose True was earned on a
// sandbox that is gone (was names it, from the condition's message, or is
// ""), while no marker of its current sandbox says anything yet; stale
// names markers of an older sandbox that are still on disk.
func SandboxChanged(condType, was string, stale []string) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.PodConditionType(condType), Status: corev1.ConditionFalse, Reason: ReasonSandboxChanged}
	what := "the sandbox whose network was programmed"
	if was != "" {
		what = "sandbox " + was
	}
	c.Message = what + sandboxGone + " and the pod's current sandbox has no netready marker yet: not ready until its ADD tells"
	return LeftBehind(c, stale)
}

// The texts by which a condition names what it was judged without, which
// ParseLeftBehind reads back for readers that have only the API.
const (
	sandboxGone = " is gone"
	leftLead    = " (markers of an older sandbox left: "
)

// LeftBehind is c naming stale, the markers (<ShortID>_<ifName>) of an
// older sandbox still on disk, for people: the message is cut at a bound,
// so the sidecar keeps what it must remember of them elsewhere.
func LeftBehind(c corev1.PodCondition, stale []string) corev1.PodCondition {
	if len(stale) > 0 {
		c.Message += leftLead + strings.Join(stale, ", ") + ")"
	}
	c.Message = truncate(c.Message)
	return c
}

// ParseLeftBehind reads back, from a SandboxChanged or NotObserved
// condition, the sandboxes it names as gone and the markers it names as an
// older sandbox's (LeftBehind), as far as the message was not cut. Other
// conditions name none. It is for readers, and for a sidecar taking over
// a pod from a v0.5 sidecar, which kept this in the message; otherwise the
// sidecar decides on its own record, never on a message.
func ParseLeftBehind(c *corev1.PodCondition) (sandboxes, markers []string) {
	if c == nil || (c.Reason != ReasonSandboxChanged && c.Reason != ReasonNotObserved) {
		return nil, nil
	}
	if c.Reason == ReasonSandboxChanged {
		if rest, ok := strings.CutPrefix(c.Message, "sandbox "); ok {
			if ids, _, ok := strings.Cut(rest, sandboxGone); ok && !strings.Contains(ids, " ") {
				sandboxes = strings.Split(ids, ",")
			}
		}
	}
	if _, list, ok := strings.Cut(c.Message, leftLead); ok {
		// A list cut short by truncate ends without ")": its last name
		// may be cut, and matches no marker.
		list, _, _ = strings.Cut(list, ")")
		markers = strings.Split(list, ", ")
	}
	return sandboxes, markers
}

// Unreadable is a marker file that exists but cannot be read.
type Unreadable struct {
	Path string
	Err  error
}

// WithUnreadable is c (the condition from the pod's readable markers, or
// none) kept False because of markers that cannot be read: they may be
// pending. The message names each file and its error first.
func WithUnreadable(c *corev1.PodCondition, bad []Unreadable, condType string) corev1.PodCondition {
	bad = slices.Clone(bad)
	slices.SortFunc(bad, func(a, b Unreadable) int { return strings.Compare(a.Path, b.Path) })
	var parts []string
	for _, u := range bad {
		parts = append(parts, fmt.Sprintf("cannot read marker %s (%v)", u.Path, u.Err))
	}
	msg := strings.Join(parts, "; ") + "; keeping the pod not ready until it can be read (retried)"
	if c != nil && c.Message != "" {
		msg += "; " + c.Message
	}
	return corev1.PodCondition{Type: corev1.PodConditionType(condType), Status: corev1.ConditionFalse,
		Reason: ReasonMarkerUnreadable, Message: truncate(msg)}
}

// restsOn names, for a ready marker, the results that carry a note (the
// cross-node parts: what across nodes the ready rests on), or "". It
// writes no "; ", which separates attachments.
func restsOn(m *marker.Marker) string {
	var notes []string
	for _, ch := range m.Checks {
		if ch.Ready && ch.Note != "" {
			notes = append(notes, ch.Kind+" "+ch.Target+": "+ch.Note)
		}
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.ReplaceAll(strings.Join(notes, ", "), "; ", ", ") + ")"
}

// Unmet lists a marker's unmet checks with why.
func Unmet(m *marker.Marker) string {
	var unmet []string
	for _, ch := range m.Checks {
		if !ch.Ready {
			s := ch.Kind + " " + ch.Target
			if ch.Why != "" {
				s += " (" + ch.Why + ")"
			}
			unmet = append(unmet, s)
		}
	}
	return strings.Join(unmet, ", ")
}

// HostNetwork is the condition of a hostNetwork pod: it has no pod network
// to wait for.
func HostNetwork(condType string) corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodConditionType(condType), Status: corev1.ConditionTrue, Reason: ReasonHostNetwork,
		Message: "the pod uses the host network; there is no pod network to wait for"}
}

// Off is the condition of a gated pod while netready is switched off:
// True, whatever its markers say, with how to switch it on again.
func Off(condType string) corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodConditionType(condType), Status: corev1.ConditionTrue, Reason: ReasonOff,
		Message: "netready is switched off (ConfigMap netready-off in netready's namespace): the gate is released without checking the pod's network; " +
			"switch it on again with kubectl netready on. A True given while off stays; pods started after that are checked again"}
}

// NotObserved is the condition of a pod whose sandbox has been up for
// grace with no marker: netready never saw its ADD. ready says whether the
// operator lets such pods go Ready (--unobserved=ready).
func NotObserved(condType string, ready bool, grace time.Duration) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.PodConditionType(condType), Status: corev1.ConditionTrue, Reason: ReasonNotObserved}
	why := fmt.Sprintf("no netready marker %s after the pod's sandbox came up: netready did not see its ADD (the pod started before netready was chained in, or the marker was lost)", grace)
	if ready {
		c.Message = why + "; not gating it (--unobserved=ready)"
	} else {
		c.Status = corev1.ConditionFalse
		c.Message = why + "; keeping it not ready (--unobserved=notready)"
	}
	return c
}

// NotObservedHeld is the condition of a pod netready did not see while
// netready's installer is backing off from an agent that keeps removing
// its entry (why): the pod may have started without netready, so it is
// kept not ready whatever --unobserved says, for a bounded time
// (--not-in-effect-hold-max).
func NotObservedHeld(condType, why string) corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodConditionType(condType), Status: corev1.ConditionFalse, Reason: ReasonNotObserved,
		Message: truncate("no netready marker, and netready may not have been in the chain when the pod started: " + why)}
}

// notInEffectLead starts the verdict of NotInEffect, which IsNotInEffect
// reads back.
const notInEffectLead = "netready is not in effect on this node for network "

// NotInEffect is the condition of a pod whose every pending attachment
// waits on a preset whose agent has never written on this node (networks
// name them): netready cannot tell there, so once hold has passed since
// its ADD began the pod is judged as one netready did not see, as ready
// says (--unobserved). The verdict comes right after the sandbox, so that
// truncation keeps it; the attachments follow as ForMarkers names them.
func NotInEffect(ms []*marker.Marker, condType string, patience time.Duration, now time.Time, ready bool, networks []string, hold time.Duration) corev1.PodCondition {
	base := ForMarkers(ms, condType, patience, now)
	c := corev1.PodCondition{Type: base.Type, Status: corev1.ConditionTrue, Reason: ReasonNotObserved}
	verdict := fmt.Sprintf("%s%s: its preset's agent has never written here, so the pod is judged as one netready did not see, %s after its ADD began (--not-in-effect-hold-max)",
		notInEffectLead, strings.Join(networks, ", "), hold)
	if ready {
		verdict += "; not gating it (--unobserved=ready)"
	} else {
		c.Status = corev1.ConditionFalse
		verdict += "; keeping it not ready (--unobserved=notready)"
	}
	head, rest := "", base.Message
	if id := SandboxIDs(ms); id != "" {
		head, rest = "sandbox "+id+"; ", strings.TrimPrefix(base.Message, "sandbox "+id+"; ")
	}
	c.Message = truncate(head + verdict + "; " + rest)
	return c
}

// IsNotInEffect reports whether c is a NotInEffect condition, for readers
// that have only the API (and a sidecar taking over from a v0.5 one); the
// sidecar remembers its own verdicts.
func IsNotInEffect(c *corev1.PodCondition) bool {
	if c == nil || c.Reason != ReasonNotObserved {
		return false
	}
	rest := c.Message
	if id := ParseSandbox(rest); id != "" {
		rest = strings.TrimPrefix(rest, "sandbox "+id+"; ")
	}
	return strings.HasPrefix(rest, notInEffectLead)
}

// truncate cuts s to maxMessage bytes on a character boundary: the API
// server refuses a condition message that is not valid UTF-8.
func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	end := maxMessage - len("...")
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "..."
}

// Current returns the pod's condition of type condType, if any.
func Current(pod *corev1.Pod, condType string) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if string(pod.Status.Conditions[i].Type) == condType {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// Gated reports whether the pod carries a readiness gate for condType.
func Gated(pod *corev1.Pod, condType string) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if string(g.ConditionType) == condType {
			return true
		}
	}
	return false
}

// Shows reports whether cur already says what want says.
func Shows(cur *corev1.PodCondition, want corev1.PodCondition) bool {
	return cur != nil && cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message
}

// WithTransition sets lastTransitionTime: now on a change of status, else
// what the pod already shows.
func WithTransition(want corev1.PodCondition, cur *corev1.PodCondition, now time.Time) corev1.PodCondition {
	want.LastTransitionTime = metav1.NewTime(now)
	if cur != nil && cur.Status == want.Status && !cur.LastTransitionTime.IsZero() {
		want.LastTransitionTime = cur.LastTransitionTime
	}
	want.LastProbeTime = metav1.Time{}
	return want
}

// Event is one Kubernetes Event to record on a pod.
type Event struct {
	Type, Reason, Note string
}

// EventFor returns the Event that a change from cur to want deserves: one
// per new reason, and one when a pending attachment passes its patience.
// It returns false when the change is not worth an Event. A pod whose first
// condition is True gets none: a pod start then costs the API server one
// write, the condition (BenchmarkSidecarsAt100Nodes), and the condition
// says all the Event would.
func EventFor(cur *corev1.PodCondition, want corev1.PodCondition) (Event, bool) {
	sameReason := cur != nil && cur.Reason == want.Reason
	late := func(c *corev1.PodCondition) bool {
		return strings.Contains(c.Message, "still not programmed more than")
	}
	switch want.Reason {
	case ReasonProgrammed:
		if cur != nil && !sameReason {
			return Event{corev1.EventTypeNormal, ReasonProgrammed, want.Message}, true
		}
	case ReasonNotProgrammed:
		if !sameReason || (late(&want) && !late(cur)) {
			return Event{corev1.EventTypeWarning, ReasonNotProgrammed, "ADD gave up waiting; the sidecar goes on checking: " + want.Message}, true
		}
	case ReasonNotObserved, ReasonMarkerUnreadable, ReasonSandboxChanged, ReasonOff:
		if !sameReason {
			return Event{corev1.EventTypeWarning, want.Reason, want.Message}, true
		}
	case ReasonHostNetwork:
		if cur != nil && !sameReason {
			return Event{corev1.EventTypeNormal, ReasonHostNetwork, want.Message}, true
		}
	}
	return Event{}, false
}

// Patch is the strategic-merge patch of pods/status for one condition. The
// UID in metadata makes the API server refuse the patch (409) if the pod
// of that name is another one now.
func Patch(uid types.UID, cond corev1.PodCondition) ([]byte, error) {
	body := map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status": map[string]any{
			"conditions": []corev1.PodCondition{cond},
		},
	}
	return json.Marshal(body)
}
