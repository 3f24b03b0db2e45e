package explain

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/netready/netready/pkg/publish"
)

// reader reads the API for one report. Explaining a pod, it is lenient:
// a developer who may read only their namespace still gets the report
// of what they can read, and each read refused is named in unread.
// status is for operators, who must see every node: a refusal fails it.
type reader struct {
	c        kubernetes.Interface
	o        Options
	condType string
	lenient  bool
	unread   []string
	// noSidecars: netready's pods could not be read, so a node without
	// one cannot be told from one whose pod is hidden.
	noSidecars bool
}

// skip says whether the report goes on without what err refused; if so,
// what names it in the report.
func (rd *reader) skip(err error, what string) bool {
	if !rd.lenient || !apierrors.IsForbidden(err) {
		return false
	}
	rd.unread = append(rd.unread, what)
	return true
}

// reason is the API's reason for err, for a person: "forbidden".
func reason(err error) string {
	return strings.ToLower(string(apierrors.ReasonForError(err)))
}

// perNodeLists is up to how many nodes have their pods listed node by
// node (the API server indexes pods by node); beyond, one paginated list
// of every scheduled pod costs fewer requests than a list per node.
const perNodeLists = 8

// pageSize is how many pods each page of that list holds.
const pageSize = 1000

// countWaiting sets each node's waiting pods: gated, not being deleted,
// their condition not True; and the oldest one's age.
func (rd *reader) countWaiting(ctx context.Context, nodes []NodeReport, now time.Time) error {
	oldest := map[string]time.Time{}
	waiting := map[string]int{}
	count := func(p *corev1.Pod) {
		if p.Spec.NodeName == "" || !publish.Gated(p, rd.condType) || p.DeletionTimestamp != nil {
			return
		}
		if cur := publish.Current(p, rd.condType); cur != nil && cur.Status == corev1.ConditionTrue {
			return
		}
		waiting[p.Spec.NodeName]++
		since := p.CreationTimestamp.Time
		if o := oldest[p.Spec.NodeName]; o.IsZero() || since.Before(o) {
			oldest[p.Spec.NodeName] = since
		}
	}
	if len(nodes) <= perNodeLists {
		for i := range nodes {
			name := nodes[i].Node
			pods, err := rd.c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
			switch {
			case err == nil:
			case rd.skip(err, fmt.Sprintf("could not list the pods of node %s (%s): its waiting pods are not counted", name, reason(err))):
				return nil
			default:
				return fmt.Errorf("list the pods of %s: %w", name, err)
			}
			for j := range pods.Items {
				if p := &pods.Items[j]; p.Spec.NodeName == name {
					count(p)
				}
			}
		}
	} else {
		p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return rd.c.CoreV1().Pods("").List(ctx, opts)
		})
		p.PageSize = pageSize
		err := p.EachListItem(ctx, metav1.ListOptions{FieldSelector: fields.OneTermNotEqualSelector("spec.nodeName", "").String()}, func(obj runtime.Object) error {
			if pod, ok := obj.(*corev1.Pod); ok {
				count(pod)
			}
			return nil
		})
		switch {
		case err == nil:
		case rd.skip(err, fmt.Sprintf("could not list pods in all namespaces (%s): the nodes' waiting pods are not counted", reason(err))):
			return nil
		default:
			return fmt.Errorf("list the pods of every node: %w", err)
		}
	}
	for i := range nodes {
		n := &nodes[i]
		n.Waiting = waiting[n.Node]
		if o := oldest[n.Node]; !o.IsZero() {
			n.OldestWait = age(now, o)
		}
	}
	return nil
}
