package kubeapi

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// ScopeResource is a cluster-scoped resource that decides the sidecar's
// scope, which it watches to know when to prove it again (package
// scopecheck): the admission policies and their bindings, and the RBAC
// objects that grant its identity (sidecar-identity.netready.io).
type ScopeResource string

const (
	Policies            ScopeResource = "validatingadmissionpolicies"
	PolicyBindings      ScopeResource = "validatingadmissionpolicybindings"
	ClusterRoles        ScopeResource = "clusterroles"
	ClusterRoleBindings ScopeResource = "clusterrolebindings"
)

// scopeClient returns the client of r's group and an empty list of r.
func (k *REST) scopeClient(r ScopeResource) (rest.Interface, runtime.Object, error) {
	switch r {
	case Policies:
		return k.admission, &admissionv1.ValidatingAdmissionPolicyList{}, nil
	case PolicyBindings:
		return k.admission, &admissionv1.ValidatingAdmissionPolicyBindingList{}, nil
	case ClusterRoles:
		return k.rbac, &rbacv1.ClusterRoleList{}, nil
	case ClusterRoleBindings:
		return k.rbac, &rbacv1.ClusterRoleBindingList{}, nil
	}
	return nil, nil, fmt.Errorf("%q is not a resource that decides the scope", r)
}

// ListScope and WatchScope read r, for an informer (RBAC: list and
// watch, nothing else).
func (k *REST) ListScope(ctx context.Context, r ScopeResource, opts metav1.ListOptions) (runtime.Object, error) {
	c, list, err := k.scopeClient(r)
	if err != nil {
		return nil, err
	}
	return list, c.Get().Resource(string(r)).VersionedParams(&opts, k.params).Do(ctx).Into(list)
}

func (k *REST) WatchScope(ctx context.Context, r ScopeResource, opts metav1.ListOptions) (watch.Interface, error) {
	c, _, err := k.scopeClient(r)
	if err != nil {
		return nil, err
	}
	opts.Watch = true
	return c.Get().Resource(string(r)).VersionedParams(&opts, k.params).Watch(ctx)
}
