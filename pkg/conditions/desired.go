package conditions

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/netready/netready/pkg/marker"
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
}

// judgeOptions are the controller's options that the judgement reads.
type judgeOptions struct {
	CondType        string
	PendingTimeout  time.Duration
	UnobservedGrace time.Duration
	UnobservedReady bool
	// Hold, when set, keeps unobserved pods not ready, saying why: the
	// installer is backing off, so a pod may have skipped netready.
	Hold string
}

// judgement is the condition a pod should show, if it is time to say.
type judgement struct {
	Cond    corev1.PodCondition
	Publish bool
	// FromStrays: Cond comes from stray unreadable markers.
	FromStrays bool
	// After, when set, is when to judge the pod again (the end of its
	// unobserved grace).
	After time.Duration
}

// judge is the condition a gated pod should show: pure, from the pod, what
// the controller knows of it, and the time.
//
// A True is never kept for a sandbox that is gone. Markers of a sandbox
// older than the pod's current one do not count (staleMarkers), and a pod
// whose True was earned on markers that no longer count, or are gone, is
// False with reason SandboxChanged until a marker of its current sandbox,
// or the end of its unobserved grace, says otherwise.
func judge(pod *corev1.Pod, v podView, o judgeOptions, now time.Time) judgement {
	if pod.Spec.HostNetwork {
		return judgement{Cond: publish.HostNetwork(o.CondType), Publish: true}
	}
	current, stale := staleMarkers(pod, v.Markers)
	if len(v.Unreadable) > 0 {
		var base *corev1.PodCondition
		if len(current) > 0 {
			cond := publish.ForMarkers(current, o.CondType, o.PendingTimeout, now)
			base = &cond
		}
		return judgement{Cond: publish.WithUnreadable(base, v.Unreadable, o.CondType), Publish: true}
	}
	if len(current) > 0 {
		return judgement{Cond: publish.ForMarkers(current, o.CondType, o.PendingTimeout, now), Publish: true}
	}
	cur := publish.Current(pod, o.CondType)
	var after time.Duration
	if since, up := sandboxUp(pod); up {
		if after = since.Add(o.UnobservedGrace).Sub(now); after <= 0 {
			// A marker that could never be read may be this pod's. A
			// pod already judged otherwise keeps its condition: one bad
			// file must not flip every running pod of the node.
			if len(v.Strays) > 0 && (cur == nil || cur.Reason == publish.ReasonMarkerUnreadable) {
				return judgement{Cond: publish.WithUnreadable(nil, v.Strays, o.CondType), Publish: true, FromStrays: true}
			}
			if o.Hold != "" {
				return judgement{Cond: publish.NotObservedHeld(o.CondType, o.Hold), Publish: true}
			}
			return judgement{Cond: publish.NotObserved(o.CondType, o.UnobservedReady, o.UnobservedGrace), Publish: true}
		}
	}
	if cur != nil && cur.Status == corev1.ConditionTrue && cur.Reason == publish.ReasonProgrammed && !finished(pod) {
		var names []string
		for _, m := range stale {
			names = append(names, publish.ShortID(m.ContainerID)+"_"+m.IfName)
		}
		slices.Sort(names)
		return judgement{Cond: publish.SandboxChanged(o.CondType, publish.ParseSandbox(cur.Message), names), Publish: true, After: after}
	}
	return judgement{After: after}
}

// finished reports a pod that is going away or whose containers are done:
// it leaves its Services anyway, and a write for it buys nothing.
func finished(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// staleMarkers splits a pod's markers into those of its current sandbox
// and those of an older one, which DEL did not remove (a stateDir that
// outlives a reboot, a runtime that lost the sandbox). A marker is of an
// older sandbox when:
//   - another sandbox's marker of the pod is newer;
//   - PodReadyToStartContainers turned False after the marker's ADD began
//     (the sandbox went down after it; kubelet's and the marker's times
//     are the same node's clock, the condition's in whole seconds);
//   - the pod's sandbox is up (or kubelet reports no
//     PodReadyToStartContainers) with IPs, and none of that sandbox's
//     markers holds one of them (a secondary network's marker may hold none; its
//     primary's does).
func staleMarkers(pod *corev1.Pod, ms []*marker.Marker) (current, stale []*marker.Marker) {
	if len(ms) == 0 {
		return nil, nil
	}
	newest := ms[0]
	for _, m := range ms[1:] {
		if m.CreatedAt.After(newest.CreatedAt.Time) {
			newest = m
		}
	}
	var prtsc *corev1.PodCondition
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReadyToStartContainers {
			prtsc = &pod.Status.Conditions[i]
		}
	}
	var podIPs []string
	for _, ip := range pod.Status.PodIPs {
		podIPs = append(podIPs, ip.IP)
	}
	sandboxHasPodIP := false
	for _, m := range ms {
		if m.ContainerID == newest.ContainerID && holdsAny(m.IPs, podIPs) {
			sandboxHasPodIP = true
		}
	}
	for _, m := range ms {
		switch {
		case m.ContainerID != newest.ContainerID:
			stale = append(stale, m)
		case prtsc != nil && prtsc.Status != corev1.ConditionTrue && prtsc.LastTransitionTime.After(m.CreatedAt.Truncate(time.Second)):
			stale = append(stale, m)
		case (prtsc == nil || prtsc.Status == corev1.ConditionTrue) && len(podIPs) > 0 && !sandboxHasPodIP:
			// Up (or a kubelet without the condition, whose pod IP is
			// the running sandbox's), and none of these markers holds it.
			stale = append(stale, m)
		default:
			current = append(current, m)
		}
	}
	return current, stale
}

// holdsAny reports whether a marker's IPs (with prefix length) hold one of
// ips (without).
func holdsAny(markerIPs, ips []string) bool {
	for _, cidr := range markerIPs {
		for _, ip := range ips {
			if len(cidr) > len(ip) && cidr[:len(ip)] == ip && cidr[len(ip)] == '/' {
				return true
			}
		}
	}
	return false
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
