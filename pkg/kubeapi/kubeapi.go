// Package kubeapi owns netready-sidecar's calls to the Kubernetes API: this
// node's pods and their status, its own Node, Events, who it is, what
// decides its scope (scope.go) and CiliumEndpoints (ciliumendpoints.go), over REST clients that know only the API
// groups it calls, and the recorder that sends Events in the background.
package kubeapi

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	recordutil "k8s.io/client-go/tools/record/util"
)

// Timeout bounds each call to the API server.
const Timeout = 10 * time.Second

// RepeatWarningAfter is how long after its last Event a warning that still
// holds is recorded again: before that Event expires (the API server's
// --event-ttl, an hour by default), so that kubectl netready status goes
// on showing it.
const RepeatWarningAfter = 50 * time.Minute

// Client is all the sidecar asks of the API server: this node's pods and
// their status, its own Node, and Events about pods.
type Client interface {
	ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	PatchPodStatus(ctx context.Context, namespace, name string, pt types.PatchType, data []byte) error
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) (*corev1.Node, error)
	CreateEvent(ctx context.Context, ev *eventsv1.Event) error
	// GetCiliumEndpoint reads one CiliumEndpoint, as JSON, for the
	// Cilium cross-node part (package pending).
	GetCiliumEndpoint(ctx context.Context, namespace, name string) ([]byte, error)
}

// REST is Client over two REST clients whose codec knows core/v1 and
// events/v1 only. client-go's typed clients pull in a scheme of every API
// group, which doubled the binary and its resident memory.
type REST struct {
	core, events, authn, admission, rbac rest.Interface
	// cilium knows no types: what it reads is decoded by its reader.
	cilium rest.Interface
	params runtime.ParameterCodec
	dryRun bool
}

// DryRun returns a Client whose writes the API server admits, through
// every admission policy, but does not persist (dryRun=All).
func (k *REST) DryRun() *REST {
	c := *k
	c.dryRun = true
	return &c
}

// write marks req as a dry run when k is one.
func (k *REST) write(req *rest.Request) *rest.Request {
	if k.dryRun {
		return req.Param("dryRun", metav1.DryRunAll)
	}
	return req
}

// NewREST makes a Client for cfg.
func NewREST(cfg *rest.Config) (*REST, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := eventsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := authnv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := admissionv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := rbacv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	addCiliumToScheme(scheme)
	codecs := serializer.NewCodecFactory(scheme)
	client := func(gv schema.GroupVersion, apiPath string) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath = &gv, apiPath
		c.NegotiatedSerializer = codecs.WithoutConversion()
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		return rest.RESTClientFor(c)
	}
	core, err := client(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, fmt.Errorf("core/v1 client: %w", err)
	}
	events, err := client(eventsv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("events/v1 client: %w", err)
	}
	authn, err := client(authnv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("authentication/v1 client: %w", err)
	}
	admission, err := client(admissionv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("admissionregistration/v1 client: %w", err)
	}
	rbac, err := client(rbacv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("rbac/v1 client: %w", err)
	}
	cilium, err := client(ciliumV2, "/apis")
	if err != nil {
		return nil, fmt.Errorf("cilium.io/v2 client: %w", err)
	}
	return &REST{core: core, events: events, authn: authn, admission: admission, rbac: rbac, cilium: cilium, params: runtime.NewParameterCodec(scheme)}, nil
}

// GetCiliumEndpoint reads namespace/name with resourceVersion "0": from
// the API server's watch cache, not etcd, so that one read per pod start
// costs the cluster little. It wraps fs.ErrNotExist while there is none.
func (k *REST) GetCiliumEndpoint(ctx context.Context, namespace, name string) ([]byte, error) {
	data, err := k.cilium.Get().Namespace(namespace).Resource("ciliumendpoints").Name(name).Param("resourceVersion", "0").Do(ctx).Raw()
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("no CiliumEndpoint %s/%s: %w", namespace, name, fs.ErrNotExist)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("forbidden: give the sidecar's ClusterRole get on ciliumendpoints.cilium.io, as deploy/components/cilium does: %w", err)
	case err != nil:
		return nil, err
	}
	return data, nil
}

func (k *REST) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	var list corev1.PodList
	err := k.core.Get().Resource("pods").VersionedParams(&opts, k.params).Do(ctx).Into(&list)
	return &list, err
}

func (k *REST) WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return k.core.Get().Resource("pods").VersionedParams(&opts, k.params).Watch(ctx)
}

func (k *REST) PatchPodStatus(ctx context.Context, namespace, name string, pt types.PatchType, data []byte) error {
	return k.write(k.core.Patch(pt)).Namespace(namespace).Resource("pods").Name(name).SubResource("status").Body(data).Do(ctx).Error()
}

// ListConfigMaps and WatchConfigMaps read namespace's ConfigMaps, for the
// off switch (package offswitch); RBAC lets the sidecar read only that one
// by name, so opts must select it by metadata.name.
func (k *REST) ListConfigMaps(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	var list corev1.ConfigMapList
	err := k.core.Get().Namespace(namespace).Resource("configmaps").VersionedParams(&opts, k.params).Do(ctx).Into(&list)
	return &list, err
}

func (k *REST) WatchConfigMaps(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return k.core.Get().Namespace(namespace).Resource("configmaps").VersionedParams(&opts, k.params).Watch(ctx)
}

func (k *REST) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	var node corev1.Node
	err := k.core.Get().Resource("nodes").Name(name).Do(ctx).Into(&node)
	return &node, err
}

func (k *REST) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) (*corev1.Node, error) {
	var node corev1.Node
	err := k.write(k.core.Patch(pt)).Resource("nodes").Name(name).SubResource(subresources...).Body(data).Do(ctx).Into(&node)
	return &node, err
}

func (k *REST) CreateEvent(ctx context.Context, ev *eventsv1.Event) error {
	return k.write(k.events.Post()).Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Error()
}

// SelfUser asks the API server who the client is (SelfSubjectReview, GA
// in 1.28); every authenticated user may ask.
func (k *REST) SelfUser(ctx context.Context) (authnv1.UserInfo, error) {
	var review authnv1.SelfSubjectReview
	if err := k.authn.Post().Resource("selfsubjectreviews").Body(&authnv1.SelfSubjectReview{}).Do(ctx).Into(&review); err != nil {
		return authnv1.UserInfo{}, fmt.Errorf("SelfSubjectReview: %w", err)
	}
	return review.Status.UserInfo, nil
}

// Pod-bound ServiceAccount tokens carry the pod in these extra keys.
const (
	extraPodName         = "authentication.kubernetes.io/pod-name"
	serviceAccountPrefix = "system:serviceaccount:"
)

// SelfPod asks the API server who the client is (SelfSubjectReview, GA in
// 1.28) and returns the pod its token is bound to: the namespace from the
// ServiceAccount's username, the name from the token's pod claim. Every
// authenticated user may ask.
func (k *REST) SelfPod(ctx context.Context) (namespace, name string, err error) {
	u, err := k.SelfUser(ctx)
	if err != nil {
		return "", "", err
	}
	sa, ok := strings.CutPrefix(u.Username, serviceAccountPrefix)
	namespace, _, _ = strings.Cut(sa, ":")
	if pods := u.Extra[extraPodName]; ok && len(pods) == 1 {
		return namespace, pods[0], nil
	}
	return "", "", fmt.Errorf("the API server knows this client as %q, with no pod-bound token", u.Username)
}

// EventRecorder is the part of client-go's events.EventRecorder the
// controller uses, so that tests can pass client-go's FakeRecorder.
type EventRecorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// Recorder writes events/v1 Events about pods and the Node in the
// background. Events come only with a change of a pod's condition or of
// the taint, so there is no series to aggregate; a full queue drops the Event (logged) rather than hold up
// publishing.
type Recorder struct {
	kube     Client
	instance string
	log      *slog.Logger
	queue    chan *eventsv1.Event
}

const (
	eventQueue       = 256
	eventNoteMax     = 1024
	reportingControl = "netready-sidecar"
	// reportingInstanceMax is the API's limit on reportingInstance.
	reportingInstanceMax = 128
)

// NewRecorder makes the recorder of the sidecar of node; Run sends.
func NewRecorder(k Client, node string, log *slog.Logger) *Recorder {
	instance := reportingControl + "-" + node
	if len(instance) > reportingInstanceMax {
		// The API refuses a longer one; a node name is up to 253.
		instance = instance[:reportingInstanceMax]
	}
	return &Recorder{kube: k, instance: instance, log: log, queue: make(chan *eventsv1.Event, eventQueue)}
}

// Eventf queues an Event about a pod, or about a Node (in the default
// namespace, where Node Events go); other objects are not recorded.
func (r *Recorder) Eventf(regarding runtime.Object, _ runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	var ref corev1.ObjectReference
	namespace := metav1.NamespaceDefault
	switch o := regarding.(type) {
	case *corev1.Pod:
		ref = corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion}
		namespace = o.Namespace
	case *corev1.Node:
		ref = corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion}
	default:
		return
	}
	now := time.Now()
	note = fmt.Sprintf(note, args...)
	if len(note) > eventNoteMax {
		// Never half a character: JSON would send it as U+FFFD, three
		// bytes, past the bound the API server enforces.
		note = strings.ToValidUTF8(note[:eventNoteMax-3], "") + "..."
	}
	ev := &eventsv1.Event{
		// As client-go names Events: <object>.<hex time>, or a UUID when
		// that is longer than a name may be (a pod name may be 253).
		ObjectMeta: metav1.ObjectMeta{Name: recordutil.GenerateEventName(ref.Name, now.UnixNano()), Namespace: namespace},
		EventTime:  metav1.NewMicroTime(now), ReportingController: reportingControl, ReportingInstance: r.instance,
		Action: action, Reason: reason, Type: eventtype, Note: note, Regarding: ref,
	}
	select {
	case r.queue <- ev:
	default:
		r.log.Warn("event queue full; dropping an Event", "regarding", ref.Kind+" "+ref.Namespace+"/"+ref.Name, "reason", reason)
	}
}

// Run sends queued Events until ctx ends, each bounded by Timeout.
func (r *Recorder) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-r.queue:
			actx, cancel := context.WithTimeout(ctx, Timeout)
			if err := r.kube.CreateEvent(actx, ev); err != nil {
				r.log.Warn("event not recorded", "regarding", ev.Regarding.Kind+" "+ev.Regarding.Namespace+"/"+ev.Regarding.Name, "reason", ev.Reason, "err", err)
			}
			cancel()
		}
	}
}

// Reason is an API error's reason for a metric's label, "Unreachable"
// when the API server gave none.
func Reason(err error) string {
	if r := apierrors.ReasonForError(err); r != metav1.StatusReasonUnknown {
		return string(r)
	}
	return "Unreachable"
}

// RESTConfig reads kubeconfig, or the in-cluster config when it is "".
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
