// Package kubeapitest owns the kubeapi.Client that unit tests use: client-go's
// fake Clientset behind the sidecar's narrow API.
package kubeapitest

import (
	"context"
	"fmt"
	"io/fs"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
)

// Fake is kubeapi.Client over client-go's fake Clientset. Like the fake,
// it cannot stream lists, so the reflector lists instead.
type Fake struct{ C *fake.Clientset }

// IsWatchListSemanticsUnSupported tells client-go's reflector to list.
func (Fake) IsWatchListSemanticsUnSupported() bool { return true }

func (f Fake) ListPods(ctx context.Context, o metav1.ListOptions) (*corev1.PodList, error) {
	return f.C.CoreV1().Pods("").List(ctx, o)
}

func (f Fake) WatchPods(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return f.C.CoreV1().Pods("").Watch(ctx, o)
}

func (f Fake) PatchPodStatus(ctx context.Context, ns, name string, pt types.PatchType, data []byte) error {
	_, err := f.C.CoreV1().Pods(ns).Patch(ctx, name, pt, data, metav1.PatchOptions{}, "status")
	return err
}

func (f Fake) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return f.C.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (f Fake) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, sub ...string) (*corev1.Node, error) {
	return f.C.CoreV1().Nodes().Patch(ctx, name, pt, data, metav1.PatchOptions{}, sub...)
}

func (f Fake) CreateEvent(ctx context.Context, ev *eventsv1.Event) error {
	_, err := f.C.EventsV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// GetCiliumEndpoint finds none: the fake knows no CiliumEndpoints.
func (f Fake) GetCiliumEndpoint(_ context.Context, ns, name string) ([]byte, error) {
	return nil, fmt.Errorf("no CiliumEndpoint %s/%s: %w", ns, name, fs.ErrNotExist)
}
