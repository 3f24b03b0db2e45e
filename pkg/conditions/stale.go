package conditions

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/publish"
)

// Which of a pod's markers are its current sandbox's, and which are left
// of an older one.

// staleMarkers splits a pod's markers into those of its current sandbox
// and those of an older one, which DEL did not remove (a stateDir that
// outlives a reboot, a runtime that lost the sandbox, netready out of the
// chain at DEL). A marker is of an older sandbox when:
//   - the pod's memory names it, or its sandbox, as gone: a sandbox
//     never comes back, and once a new one is up with the same IP nothing
//     else tells them apart;
//   - another sandbox's marker of the pod is newer;
//   - PodReadyToStartContainers turned False after the marker's ADD began
//     (the sandbox went down after it; kubelet's and the marker's times
//     are the same node's clock, the condition's in whole seconds);
//   - the pod's sandbox is up (or kubelet reports no
//     PodReadyToStartContainers) with IPs, and none of that sandbox's
//     markers holds one of them (a secondary network's marker may hold none; its
//     primary's does), unless the marker's ADD began after that sandbox
//     came up.
func staleMarkers(pod *corev1.Pod, ms []*marker.Marker, mem memory) (current, stale []*marker.Marker) {
	if len(ms) == 0 {
		return nil, nil
	}
	gone := func(m *marker.Marker) bool { return mem.gone(publish.ShortID(m.ContainerID), markerName(m)) }
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
	podIPs := podIPsOf(pod)
	var newestSandbox []*marker.Marker
	for _, m := range ms {
		if m.ContainerID == newest.ContainerID {
			newestSandbox = append(newestSandbox, m)
		}
	}
	sandboxHasPodIP := sharesAny(markerIPs(newestSandbox), podIPs)
	for _, m := range ms {
		switch {
		case gone(m):
			stale = append(stale, m)
		case m.ContainerID != newest.ContainerID:
			stale = append(stale, m)
		case prtsc != nil && prtsc.Status != corev1.ConditionTrue && prtsc.LastTransitionTime.After(m.CreatedAt.Truncate(time.Second)):
			stale = append(stale, m)
		case (prtsc == nil || (prtsc.Status == corev1.ConditionTrue && !m.CreatedAt.Truncate(time.Second).After(prtsc.LastTransitionTime.Time))) &&
			len(podIPs) > 0 && !sandboxHasPodIP:
			// Up (or a kubelet without the condition, whose pod IP is
			// the running sandbox's), and none of these markers holds it.
			// A marker whose ADD began after the sandbox kubelet shows
			// came up is a newer sandbox's, one kubelet has yet to
			// report: its IP is not the one shown yet.
			stale = append(stale, m)
		default:
			current = append(current, m)
		}
	}
	return current, stale
}

// markerIPs are the IPs of ms, without prefix length, sorted.
func markerIPs(ms []*marker.Marker) []string {
	var out []string
	for _, m := range ms {
		for _, cidr := range m.IPs {
			if ip, _, _ := strings.Cut(cidr, "/"); !slices.Contains(out, ip) {
				out = append(out, ip)
			}
		}
	}
	slices.Sort(out)
	return out
}

// podIPsOf is the pod's IPs as kubelet reports them.
func podIPsOf(pod *corev1.Pod) []string {
	var out []string
	for _, ip := range pod.Status.PodIPs {
		out = append(out, ip.IP)
	}
	return out
}

// sharesAny reports whether a and b have an IP in common.
func sharesAny(a, b []string) bool {
	return slices.ContainsFunc(a, func(ip string) bool { return slices.Contains(b, ip) })
}

// lostMarkers names the markers that a pod's lost memory may have named as
// gone: those of ADDs that began no later than the pod's condition was set
// (in whole seconds), as any of them may be an older sandbox's. A lost
// memory so ends in not ready, never in a True from a gone sandbox.
func lostMarkers(ms []*marker.Marker, cur *corev1.PodCondition) []string {
	if cur == nil {
		return nil
	}
	var out []string
	for _, m := range ms {
		if !m.CreatedAt.Truncate(time.Second).After(cur.LastTransitionTime.Time) {
			out = append(out, markerName(m))
		}
	}
	return out
}
