// Package nodewriter owns what the sidecar writes on its own Node: the
// NoSchedule taint netready.io/pod-ips-exhausted while an IP pool runs
// short, the NetworkPoolExhausted condition saying why, the patches that
// set them and touch nothing else, and the Node's Warning Events
// (warnings.go, writer.go). The scheduler stops sending pods; nothing is
// evicted.
package nodewriter

import (
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Key is the taint's key; its effect is NoSchedule.
const Key = "netready.io/pod-ips-exhausted"

// ConditionType is the Node condition that says why.
const ConditionType corev1.NodeConditionType = "NetworkPoolExhausted"

// maxMessage keeps the condition readable in kubectl describe node; the
// pool line's reader knows it (pool.MaxLine).
const maxMessage = 1024

// Reasons of the condition.
const (
	ReasonExhausted = "PodIPsExhausted"
	ReasonAvailable = "PodIPsAvailable"
)

// Has reports whether the node carries the taint.
func Has(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == Key })
}

// SpecPatch is a JSON merge patch of the node that adds (want) or removes
// the taint, or nil when the node already shows what is wanted. Taints
// are one list with no merge key, so the patch carries the whole list and
// the node's resourceVersion: a concurrent change to the taints makes it
// fail with a conflict instead of being overwritten.
func SpecPatch(node *corev1.Node, want bool) []byte {
	if Has(node) == want {
		return nil
	}
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == Key })
	if want {
		taints = append(taints, corev1.Taint{Key: Key, Effect: corev1.TaintEffectNoSchedule})
	}
	if taints == nil {
		taints = []corev1.Taint{}
	}
	p, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"spec":     map[string]any{"taints": taints},
	})
	return p
}

// Condition is the node condition for a pool that is short (or not), with
// message saying "n of m addresses in use" per network.
func Condition(short bool, message string) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionFalse, Reason: ReasonAvailable, Message: message}
	if short {
		c.Status, c.Reason = corev1.ConditionTrue, ReasonExhausted
	}
	c.Message = Truncate(c.Message, maxMessage)
	return c
}

// Truncate bounds s to max bytes, ending what it cuts with "...", and
// never splits a character: the API server would store a broken one as
// U+FFFD, or refuse it.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	end := max - len("...")
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "..."
}

// Current returns the node's condition, or nil.
func Current(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == ConditionType {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// StatusPatch is a strategic merge patch of nodes/status that sets the
// condition (conditions merge by type, so no other condition is sent), or
// nil when the node shows it already. messageToo says whether a change of
// message alone is worth a write: the counts move with every pod, and
// every write to a Node reaches every watcher of nodes.
func StatusPatch(node *corev1.Node, want corev1.NodeCondition, now time.Time, messageToo bool) []byte {
	cur := Current(node)
	if cur != nil && cur.Status == want.Status && cur.Reason == want.Reason && (!messageToo || cur.Message == want.Message) {
		return nil
	}
	want.LastHeartbeatTime = metav1.NewTime(now)
	want.LastTransitionTime = metav1.NewTime(now)
	if cur != nil && cur.Status == want.Status {
		want.LastTransitionTime = cur.LastTransitionTime
	}
	p, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{want}}})
	return p
}

// RemoveConditionPatch is a strategic merge patch of nodes/status that
// deletes the condition, or nil when the node has none.
func RemoveConditionPatch(node *corev1.Node) []byte {
	if Current(node) == nil {
		return nil
	}
	p, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]string{{"type": string(ConditionType), "$patch": "delete"}}}})
	return p
}
