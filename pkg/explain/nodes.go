package explain

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/nodewriter"
)

// Nodes reports every node.
func Nodes(ctx context.Context, c kubernetes.Interface, o Options) ([]NodeReport, error) {
	o.defaults()
	rd := &reader{c: c, o: o}
	condType, err := conditionType(ctx, c, o)
	if err != nil {
		return nil, err
	}
	rd.condType = condType
	return rd.nodeReports(ctx, fields.Everything(), nil)
}

// nodeReports reports the nodes sel selects that keep (nil: all) keeps.
// The nodes' other facts come first, so that only the kept ones have
// their pods counted.
func (rd *reader) nodeReports(ctx context.Context, sel fields.Selector, keep func(*NodeReport) bool) ([]NodeReport, error) {
	c, o := rd.c, rd.o
	name, one := sel.RequiresExactMatch("metadata.name")
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	switch {
	case err == nil:
	case one && rd.skip(err, fmt.Sprintf("could not read node %s (%s): its runtime network, taint, pools and netready pod are not shown", name, reason(err))):
		return nil, nil
	case !one && rd.skip(err, fmt.Sprintf("could not list nodes (%s): the nodes netready tainted are not shown", reason(err))):
		return nil, nil
	default:
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	now := o.Now()
	var out []NodeReport
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if one && n.Name != name {
			continue
		}
		r := NodeReport{Node: n.Name, RuntimeNetworkReady: true, Tainted: nodewriter.Has(n), Platform: platform(n)}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
				r.ReadyMessage = cond.Message
				r.RuntimeNetworkReady = !strings.Contains(cond.Message, "NetworkReady=false")
			}
		}
		if p := nodewriter.Current(n); p != nil {
			r.Pool = &Condition{Status: string(p.Status), Reason: p.Reason, Message: p.Message, Since: p.LastTransitionTime.Time, Age: age(now, p.LastTransitionTime.Time)}
			r.Pools = poolsOf(n.Name, r.Pool)
		}
		if keep == nil || keep(&r) {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	where := "each node"
	if one {
		where = "node " + name
	}
	ds, err := c.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector})
	switch {
	case err == nil:
		for i := range out {
			for j := range ds.Items {
				if p := &ds.Items[j]; p.Spec.NodeName == out[i].Node {
					out[i].Netready = netreadyPod(p)
				}
			}
		}
	case rd.skip(err, fmt.Sprintf("could not list netready's pods in %s (%s): whether a netready sidecar runs on %s is not known", o.Namespace, reason(err), where)):
		rd.noSidecars = true
	default:
		return nil, fmt.Errorf("list netready's pods in %s: %w", o.Namespace, err)
	}
	warnings, err := nodeWarnings(ctx, c, now)
	switch {
	case err == nil:
		for i := range out {
			out[i].Warnings = warnings[out[i].Node]
		}
	case rd.skip(err, fmt.Sprintf("could not list Node Events in %s (%s): the sidecar's warnings about %s are not shown", metav1.NamespaceDefault, reason(err), where)):
	default:
		return nil, err
	}
	if err := rd.countWaiting(ctx, out, now); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b NodeReport) int { return cmp.Compare(a.Node, b.Node) })
	return out, nil
}

// Platforms where netready's DaemonSet runs no pod, by the labels their
// nodes carry.
var platforms = []struct{ key, value, text string }{
	{corev1.LabelOSStable, "windows", "a Windows node: netready's DaemonSet runs on Linux nodes only"},
	{"eks.amazonaws.com/compute-type", "fargate", "an EKS Fargate node: Fargate runs no DaemonSet pods"},
	{"type", "virtual-kubelet", "a virtual node (virtual-kubelet): it runs no DaemonSet pods"},
}

// platform says why no netready pod can run on n, or "".
func platform(n *corev1.Node) string {
	for _, p := range platforms {
		if n.Labels[p.key] == p.value {
			return p.text
		}
	}
	return ""
}

// operatorReasons are the sidecar's Warning Node Events that ask the
// operator to act.
var operatorReasons = []string{"NetreadyPresetNotWriting", "NetreadyStatusInactive", "NetreadyInstallBackedOff", "NetreadyConfigInvalid", "NetreadyPoolUnknown", "NetreadyScopeUnknown"}

// nodeWarnings returns, per node, the sidecar's newest Event of each
// operator reason, in operatorReasons' order. Node Events live in the
// default namespace.
func nodeWarnings(ctx context.Context, c kubernetes.Interface, now time.Time) (map[string][]Event, error) {
	list, err := c.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("regarding.kind", "Node").String()})
	if err != nil {
		return nil, fmt.Errorf("list Node Events: %w", err)
	}
	newest := map[[2]string]Event{}
	for i := range list.Items {
		e := &list.Items[i]
		if e.Regarding.Kind != "Node" || e.ReportingController != sidecarController || !slices.Contains(operatorReasons, e.Reason) {
			continue
		}
		t := eventTime(e)
		key := [2]string{e.Regarding.Name, e.Reason}
		if old, ok := newest[key]; !ok || t.After(old.Time) {
			newest[key] = Event{Type: e.Type, Reason: e.Reason, Note: e.Note, Time: t, Age: age(now, t)}
		}
	}
	out := map[string][]Event{}
	for key, e := range newest {
		out[key[0]] = append(out[key[0]], e)
	}
	for _, evs := range out {
		slices.SortFunc(evs, func(a, b Event) int {
			return cmp.Compare(slices.Index(operatorReasons, a.Reason), slices.Index(operatorReasons, b.Reason))
		})
	}
	return out, nil
}

func netreadyPod(p *corev1.Pod) *NetreadyPod {
	np := &NetreadyPod{Name: p.Name, Phase: string(p.Status.Phase)}
	for _, c := range p.Spec.Containers {
		if c.Name == sidecarContainer {
			if _, tag, ok := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":"); ok {
				np.Version = tag
			}
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			np.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return np
}
