// Package publish owns turning a readiness marker into a pod condition: the
// condition a marker asks for, whether the pod already shows it, and the
// strategic-merge patch of pods/status that sets it, guarded by the pod's
// UID so that a recreated pod of the same name is never patched.
package publish

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/marker"
)

// DefaultConditionType is the well-known name KEP-5709 proposes.
const DefaultConditionType = "networking.kubernetes.io/pod-network-ready"

// Reasons of the condition.
const (
	ReasonProgrammed    = "NetworkProgrammed"
	ReasonNotProgrammed = "NetworkNotProgrammed"
)

// maxMessage keeps the condition message readable in kubectl.
const maxMessage = 1024

// Desired is the condition a marker asks for (without lastTransitionTime).
func Desired(m *marker.Marker, condType string) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.PodConditionType(condType)}
	if m.State == marker.StateReady {
		c.Status = corev1.ConditionTrue
		c.Reason = ReasonProgrammed
		c.Message = fmt.Sprintf("network %s programmed after %d ms", m.Network, m.WaitedMs)
		return c
	}
	c.Status = corev1.ConditionFalse
	c.Reason = ReasonNotProgrammed
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
	c.Message = truncate(fmt.Sprintf("network %s: waiting for: %s", m.Network, strings.Join(unmet, "; ")))
	return c
}

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-3] + "..."
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
