package kubeapi_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/kubeapi/kubeapitest"
)

// TestRecorder: a pod's Event goes to its namespace, a Node's to default,
// anything else is not recorded, and a long note is cut to what the API
// accepts.
func TestRecorder(t *testing.T) {
	client := fake.NewClientset()
	r := kubeapi.NewRecorder(kubeapitest.Fake{C: client}, "node-a", slog.New(slog.NewTextHandler(io.Discard, nil)))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "n1"}}
	r.Eventf(pod, nil, corev1.EventTypeWarning, "NetworkNotProgrammed", "Check", "waited %d s", 3)
	r.Eventf(node, nil, corev1.EventTypeWarning, "PodIPsExhausted", "Taint", "%s", strings.Repeat("x", 2000))
	r.Eventf(&corev1.ConfigMap{}, nil, corev1.EventTypeNormal, "Ignored", "None", "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	type event struct{ Namespace, Kind, Name, Reason, Instance string }
	var got []event
	var noteLen int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		list, err := client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) < 2 {
			continue
		}
		got = nil
		for _, ev := range list.Items {
			got = append(got, event{ev.Namespace, ev.Regarding.Kind, ev.Regarding.Name, ev.Reason, ev.ReportingInstance})
			if ev.Regarding.Kind == "Node" {
				noteLen = len(ev.Note)
			}
		}
		break
	}
	want := []event{
		{"default", "Node", "node-a", "PodIPsExhausted", "netready-sidecar-node-a"},
		{"shop", "Pod", "web", "NetworkNotProgrammed", "netready-sidecar-node-a"},
	}
	slices.SortFunc(got, func(a, b event) int { return strings.Compare(a.Namespace, b.Namespace) })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
	if noteLen != 1024 {
		t.Errorf("the long note is %d bytes, want cut to 1024", noteLen)
	}
}

// TestRecorderLongNames: a pod name of 253 characters and a node name of
// as many make Events whose name and reportingInstance the API accepts.
func TestRecorderLongNames(t *testing.T) {
	client := fake.NewClientset()
	long := strings.Repeat("n", 253)
	r := kubeapi.NewRecorder(kubeapitest.Fake{C: client}, long, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.Eventf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: long, UID: "u1"}}, nil, corev1.EventTypeWarning, "NetworkNotProgrammed", "Check", "x")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		list, _ := client.EventsV1().Events("shop").List(ctx, metav1.ListOptions{})
		if len(list.Items) == 0 {
			continue
		}
		ev := list.Items[0]
		if errs := validation.IsDNS1123Subdomain(ev.Name); len(errs) > 0 {
			t.Errorf("Event name %q: %v", ev.Name, errs)
		}
		if len(ev.ReportingInstance) > 128 {
			t.Errorf("reportingInstance is %d characters, the API takes 128", len(ev.ReportingInstance))
		}
		return
	}
	t.Fatal("no Event recorded")
}
