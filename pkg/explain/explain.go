// Package explain owns what `kubectl netready` reports: why a pod is, or
// is not, network-ready, and each node's netready state, read from the
// Kubernetes API alone (an operator's laptop has no node access), and how
// that is shown as text or JSON.
package explain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/publish"
)

// Where deploy/ puts netready, and what it names.
const (
	DefaultNamespace   = "kube-system"
	settingsConfigMap  = "netready-settings"
	gateLabel          = "netready.io/readiness-gate"
	sidecarController  = "netready-sidecar"
	sidecarContainer   = "sidecar"
	reasonSandboxError = "FailedCreatePodSandBox"
)

// Selector finds netready's DaemonSet and its pods: a namePrefix renames
// them, not their labels.
const Selector = "app=netready"

// Options say where netready runs.
type Options struct {
	// Namespace is netready's namespace (its DaemonSet, settings and
	// off switch).
	Namespace string
	// Policy is the mutating policy that adds the gate; "" finds it
	// (GatePolicy).
	Policy string
	Now    func() time.Time
}

func (o *Options) defaults() {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// PodReport is everything netready's API objects say about one pod.
type PodReport struct {
	Namespace     string `json:"namespace"`
	Pod           string `json:"pod"`
	Node          string `json:"node,omitempty"`
	Phase         string `json:"phase"`
	ConditionType string `json:"conditionType"`
	// NetworkReady is the verdict: the pod's netready condition is True.
	NetworkReady bool   `json:"networkReady"`
	Summary      string `json:"summary"`
	// Off is the off switch, when it could be read.
	Off         *Off                 `json:"off,omitempty"`
	Gate        Gate                 `json:"gate"`
	Condition   *Condition           `json:"condition,omitempty"`
	Attachments []publish.Attachment `json:"attachments,omitempty"`
	Events      []Event              `json:"events,omitempty"`
	NodeState   *NodeReport          `json:"nodeState,omitempty"`
	// For a pod not scheduled yet: why, and the nodes netready tainted.
	Scheduling   []string     `json:"scheduling,omitempty"`
	TaintedNodes []NodeReport `json:"taintedNodes,omitempty"`
	// NoSidecar says, for a gated pod on a node where no netready pod
	// runs, that nothing will publish its condition.
	NoSidecar string `json:"noSidecar,omitempty"`
	// Unread names each read this client was refused, and what the
	// report lacks for it.
	Unread []string `json:"unread,omitempty"`
}

// Gate says whether the pod waits for netready's condition, and why.
type Gate struct {
	Present bool   `json:"present"`
	Source  string `json:"source"`
}

// Condition is the pod's netready condition.
type Condition struct {
	Status  string    `json:"status"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"`
	Age     string    `json:"age"`
}

// Event is one Event about the pod from netready or from kubelet's
// sandbox creation.
type Event struct {
	Type   string    `json:"type"`
	Reason string    `json:"reason"`
	Note   string    `json:"note"`
	Time   time.Time `json:"time"`
	Age    string    `json:"age"`
}

// NodeReport is one node's netready state.
type NodeReport struct {
	Node string `json:"node"`
	// RuntimeNetworkReady is false when the node is NotReady because the
	// runtime's network is not ready (netready's STATUS, for one).
	RuntimeNetworkReady bool   `json:"runtimeNetworkReady"`
	ReadyMessage        string `json:"readyMessage,omitempty"`
	Tainted             bool   `json:"tainted"`
	// Platform says why no netready pod can run on the node (Windows,
	// Fargate, a virtual node), from its labels, or is empty.
	Platform string     `json:"platform,omitempty"`
	Pool     *Condition `json:"pool,omitempty"`
	// Pools are the pools Pool's message names, read back.
	Pools      []Pool       `json:"pools,omitempty"`
	Netready   *NetreadyPod `json:"netready,omitempty"`
	Waiting    int          `json:"waitingPods"`
	OldestWait string       `json:"oldestWait,omitempty"`
	// Warnings are the sidecar's newest Warning Node Event of each
	// reason for the operator: a preset's agent not writing, STATUS
	// never called, the installer backing off, an invalid entry. Events
	// last an hour (the API server's --event-ttl); the sidecar records a
	// warning that still holds again before then.
	Warnings []Event `json:"warnings,omitempty"`
}

// NetreadyPod is the netready DaemonSet's pod on a node.
type NetreadyPod struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Phase   string `json:"phase"`
	Ready   bool   `json:"ready"`
}

// Pod explains one pod with what this client may read: what it could
// not read is named in the report's Unread, and the report goes on.
func Pod(ctx context.Context, c kubernetes.Interface, namespace, name string, o Options) (*PodReport, error) {
	o.defaults()
	rd := &reader{c: c, o: o, lenient: true}
	condType, err := conditionType(ctx, c, o)
	if rd.skip(err, fmt.Sprintf("could not read netready's DaemonSet or %s in %s (%s): condition type assumed %s, the default", settingsConfigMap, o.Namespace, reason(err), publish.DefaultConditionType)) {
		condType = publish.DefaultConditionType
	} else if err != nil {
		return nil, err
	}
	rd.condType = condType
	pod, err := c.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	now := o.Now()
	r := &PodReport{Namespace: namespace, Pod: name, Node: pod.Spec.NodeName, Phase: string(pod.Status.Phase), ConditionType: condType}
	r.Gate = rd.gateOf(ctx, pod)
	if cur := publish.Current(pod, condType); cur != nil {
		r.Condition = &Condition{Status: string(cur.Status), Reason: cur.Reason, Message: cur.Message,
			Since: cur.LastTransitionTime.Time, Age: age(now, cur.LastTransitionTime.Time)}
		r.Attachments = publish.ParseMessage(cur.Message)
		r.NetworkReady = cur.Status == corev1.ConditionTrue
	}
	if r.Off, err = rd.offSwitch(ctx); err != nil {
		return nil, err
	}
	if r.Events, err = rd.podEvents(ctx, pod, now); err != nil {
		return nil, err
	}
	if pod.Spec.NodeName != "" {
		nodes, err := rd.nodeReports(ctx, fields.OneTermEqualSelector("metadata.name", pod.Spec.NodeName), nil)
		if err != nil {
			return nil, err
		}
		if len(nodes) == 1 {
			r.NodeState = &nodes[0]
		}
	} else {
		r.Scheduling = schedulingNotes(r.Events)
		// Only the tainted nodes are reported, so only their pods are counted.
		nodes, err := rd.nodeReports(ctx, fields.Everything(), func(n *NodeReport) bool { return n.Tainted })
		if err != nil {
			return nil, err
		}
		r.TaintedNodes = nodes
	}
	r.NoSidecar = r.noSidecar(rd.noSidecars)
	r.Unread = rd.unread
	r.Summary = r.summary()
	return r, nil
}

// noSidecar says why nothing will publish the pod's gate: it waits on a
// node where no netready pod runs (a Windows, Fargate or virtual node the
// admission policy could not foresee, or one the DaemonSet leaves out).
func (r *PodReport) noSidecar(hidden bool) string {
	n := r.NodeState
	if hidden || n == nil || n.Netready != nil || !r.Gate.Present || r.NetworkReady {
		return ""
	}
	why := n.Platform
	if why == "" {
		why = "its DaemonSet's nodeSelector, affinity or tolerations leave the node out, or its pod is not created yet"
	}
	return fmt.Sprintf("no netready sidecar runs on node %s (%s): nothing will publish this gate", n.Node, why)
}

// gateOf says whether the pod has the gate, and where it came from: the
// mutating policy adds it in labelled namespaces.
func (rd *reader) gateOf(ctx context.Context, pod *corev1.Pod) Gate {
	labelled, known := false, true
	ns, err := rd.c.CoreV1().Namespaces().Get(ctx, pod.Namespace, metav1.GetOptions{})
	switch {
	case err == nil:
		labelled = ns.Labels[gateLabel] == "enabled"
	case rd.skip(err, fmt.Sprintf("could not read namespace %s (%s): whether the admission policy gates its pods is not known", pod.Namespace, reason(err))):
		known = false
	}
	gated := publish.Gated(pod, rd.condType)
	switch {
	case !known && gated:
		return Gate{true, "added by the admission policy netready-readiness-gate or written in the pod's spec (namespace " + pod.Namespace + "'s labels not readable)"}
	case !known:
		return Gate{false, "none: netready does not gate this pod (namespace " + pod.Namespace + "'s labels not readable)"}
	case gated && labelled:
		return Gate{true, fmt.Sprintf("added by the admission policy netready-readiness-gate: namespace %s is labelled %s=enabled", pod.Namespace, gateLabel)}
	case gated:
		return Gate{true, "written in the pod's spec (its namespace is not labelled " + gateLabel + "=enabled)"}
	case labelled:
		return Gate{false, "none: the namespace is labelled, so the pod was created before the policy took effect or while netready was off, is hostNetwork, or the policy failed open"}
	}
	return Gate{false, fmt.Sprintf("none: netready does not gate this pod (label namespace %s %s=enabled to gate new pods)", pod.Namespace, gateLabel)}
}

// podEvents returns netready's Events about the pod, and kubelet's
// sandbox failures (which quote the plugin's error), oldest first.
func (rd *reader) podEvents(ctx context.Context, pod *corev1.Pod, now time.Time) ([]Event, error) {
	list, err := rd.c.EventsV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("regarding.name", pod.Name).String()})
	switch {
	case err == nil:
	case rd.skip(err, fmt.Sprintf("could not list Events in %s (%s): netready's, kubelet's and the scheduler's Events for the pod are not shown", pod.Namespace, reason(err))):
		return nil, nil
	default:
		return nil, fmt.Errorf("list the pod's Events: %w", err)
	}
	var out []Event
	for _, e := range list.Items {
		if e.Regarding.Name != pod.Name || e.Regarding.UID != "" && e.Regarding.UID != pod.UID {
			continue
		}
		if e.ReportingController != sidecarController && e.Reason != reasonSandboxError && e.Reason != "FailedScheduling" {
			continue
		}
		t := eventTime(&e)
		out = append(out, Event{Type: e.Type, Reason: e.Reason, Note: e.Note, Time: t, Age: age(now, t)})
	}
	slices.SortFunc(out, func(a, b Event) int { return a.Time.Compare(b.Time) })
	return out, nil
}

func eventTime(e *eventsv1.Event) time.Time {
	for _, t := range []time.Time{e.EventTime.Time, e.DeprecatedLastTimestamp.Time, e.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

func schedulingNotes(evs []Event) []string {
	var out []string
	for _, e := range evs {
		if e.Reason == "FailedScheduling" && !slices.Contains(out, e.Note) {
			out = append(out, e.Note)
		}
	}
	return out
}

func (r *PodReport) summary() string {
	where := ""
	if r.Node != "" {
		where = " on node " + r.Node
	}
	// A pod placed on a node whose pool is exhausted waits for an
	// address: its sandbox fails until one is freed.
	pool := ""
	if r.NodeState != nil {
		pool = poolSummary(r.NodeState)
	}
	switch {
	case r.NetworkReady && r.Condition.Reason == publish.ReasonOff:
		s := fmt.Sprintf("pod %s/%s%s was released by netready's off switch, not by its network (True, reason %s): its network was not checked", r.Namespace, r.Pod, where, publish.ReasonOff)
		if r.Off != nil && !r.Off.On {
			s += "; netready is on again, and a True given while off stays"
		}
		return s
	case r.NetworkReady:
		return fmt.Sprintf("pod %s/%s%s is network-ready", r.Namespace, r.Pod, where)
	case r.Node == "":
		s := fmt.Sprintf("pod %s/%s is not scheduled", r.Namespace, r.Pod)
		if len(r.TaintedNodes) > 0 {
			s += fmt.Sprintf("; netready tainted %d node(s) whose IP pool is exhausted", len(r.TaintedNodes))
			var names []string
			for i := range r.TaintedNodes {
				n := &r.TaintedNodes[i]
				for _, p := range n.exhausted() {
					names = append(names, fmt.Sprintf("%s's %s, %s", n.Node, p.name(), p.freeText()))
				}
			}
			if len(names) > maxNamed {
				names = append(names[:maxNamed], fmt.Sprintf("and %d more", len(names)-maxNamed))
			}
			if len(names) > 0 {
				s += ": " + strings.Join(names, "; ")
			}
		}
		return s
	case !r.Gate.Present && r.Condition == nil:
		return fmt.Sprintf("pod %s/%s%s is not gated: netready publishes no network readiness for it%s", r.Namespace, r.Pod, where, pool)
	case r.Condition == nil:
		return fmt.Sprintf("pod %s/%s%s has no netready condition yet%s", r.Namespace, r.Pod, where, pool)
	}
	return fmt.Sprintf("pod %s/%s%s is NOT network-ready (%s)%s", r.Namespace, r.Pod, where, r.Condition.Reason, pool)
}

// maxNamed is how many exhausted pools an unscheduled pod's summary
// names; the tainted nodes below name them all.
const maxNamed = 3

// age is how long ago t was, rounded for reading.
func age(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d < time.Hour {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}
