package kubeapi

import (
	"context"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// ciliumV2 is the API group of Cilium's CRDs.
var ciliumV2 = schema.GroupVersion{Group: "cilium.io", Version: "v2"}

// CiliumEndpoint is what the sidecar decodes of a CiliumEndpoint
// (cilium/cilium pkg/k8s/apis/cilium.io/v2 CiliumEndpoint) from a list or
// a watch: its name, resourceVersion, security identity, IPs and the IP
// of the node it is on. Nothing else of the object is kept: a watch of
// every CiliumEndpoint of a large cluster delivers a great many.
type CiliumEndpoint struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        struct {
		Namespace       string `json:"namespace,omitempty"`
		Name            string `json:"name,omitempty"`
		ResourceVersion string `json:"resourceVersion,omitempty"`
	} `json:"metadata"`
	Status struct {
		Identity *struct {
			ID int64 `json:"id"`
		} `json:"identity,omitempty"`
		Networking *struct {
			Addressing []struct {
				IPv4 string `json:"ipv4,omitempty"`
				IPv6 string `json:"ipv6,omitempty"`
			} `json:"addressing,omitempty"`
			// Node is the IP of the node the endpoint is on.
			Node string `json:"node,omitempty"`
		} `json:"networking,omitempty"`
	} `json:"status"`
}

// CiliumEndpointList is a list of them; only its resourceVersion is read.
type CiliumEndpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []CiliumEndpoint `json:"items"`
}

// GetResourceVersion is the object's resourceVersion, which client-go's
// RetryWatcher resumes from.
func (c *CiliumEndpoint) GetResourceVersion() string { return c.Metadata.ResourceVersion }

// Identity is the endpoint's security identity, 0 when it has none.
func (c *CiliumEndpoint) Identity() int64 {
	if c.Status.Identity == nil {
		return 0
	}
	return c.Status.Identity.ID
}

// IPs are the endpoint's addresses as the object has them.
func (c *CiliumEndpoint) IPs() []string {
	var ips []string
	if c.Status.Networking == nil {
		return nil
	}
	for _, a := range c.Status.Networking.Addressing {
		for _, ip := range []string{a.IPv4, a.IPv6} {
			if ip != "" {
				ips = append(ips, ip)
			}
		}
	}
	return ips
}

// NodeIP is the IP of the node the endpoint is on, "" when not given.
func (c *CiliumEndpoint) NodeIP() string {
	if c.Status.Networking == nil {
		return ""
	}
	return c.Status.Networking.Node
}

// DeepCopyObject copies c, as runtime.Object asks.
func (c *CiliumEndpoint) DeepCopyObject() runtime.Object {
	out := *c
	if c.Status.Identity != nil {
		id := *c.Status.Identity
		out.Status.Identity = &id
	}
	if c.Status.Networking != nil {
		n := *c.Status.Networking
		n.Addressing = append(n.Addressing[:0:0], n.Addressing...)
		out.Status.Networking = &n
	}
	return &out
}

// DeepCopyObject copies l, as runtime.Object asks.
func (l *CiliumEndpointList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]CiliumEndpoint, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*CiliumEndpoint)
	}
	return &out
}

// addCiliumToScheme registers the two types, so that the cilium.io/v2
// client decodes lists and watch events into them.
func addCiliumToScheme(scheme *runtime.Scheme) {
	scheme.AddKnownTypes(ciliumV2, &CiliumEndpoint{}, &CiliumEndpointList{})
	metav1.AddToGroupVersion(scheme, ciliumV2)
}

// ListCiliumEndpoints lists CiliumEndpoints of every namespace, with
// opts' limit, resourceVersion and continue only.
func (k *REST) ListCiliumEndpoints(ctx context.Context, opts metav1.ListOptions) (*CiliumEndpointList, error) {
	req := k.cilium.Get().Resource("ciliumendpoints")
	if opts.Limit > 0 {
		req = req.Param("limit", strconv.FormatInt(opts.Limit, 10))
	}
	if opts.ResourceVersion != "" {
		req = req.Param("resourceVersion", opts.ResourceVersion)
	}
	if opts.Continue != "" {
		req = req.Param("continue", opts.Continue)
	}
	var list CiliumEndpointList
	if err := req.Do(ctx).Into(&list); err != nil {
		return nil, fmt.Errorf("list ciliumendpoints.cilium.io: %w", err)
	}
	return &list, nil
}

// WatchCiliumEndpoints watches CiliumEndpoints of every namespace from
// opts' resourceVersion, with its bookmarks and timeout; events carry
// *CiliumEndpoint.
func (k *REST) WatchCiliumEndpoints(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	req := k.cilium.Get().Resource("ciliumendpoints").Param("watch", "true")
	if opts.ResourceVersion != "" {
		req = req.Param("resourceVersion", opts.ResourceVersion)
	}
	if opts.AllowWatchBookmarks {
		req = req.Param("allowWatchBookmarks", "true")
	}
	if opts.TimeoutSeconds != nil {
		req = req.Param("timeoutSeconds", strconv.FormatInt(*opts.TimeoutSeconds, 10))
	}
	return req.Watch(ctx)
}
