package explain

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/netready/netready/pkg/publish"
)

// netreadyDS is netready's DaemonSet, renamed as a namePrefix does, whose
// sidecar runs with command and env.
func netreadyDS(command []string, env ...corev1.EnvVar) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: "acme-netready", Labels: map[string]string{"app": "netready"}},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "install", Command: []string{"/bin/netready-install", "--condition-type=example.com/not-the-sidecar"}},
			{Name: "sidecar", Command: command, Env: env}}}}}}
}

func settings(name string, labels map[string]string, typ string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: name, Labels: labels}, Data: map[string]string{"conditionType": typ}}
}

// TestConditionTypeIsTheSidecars: kubectl netready reads the type the
// sidecar runs with from its DaemonSet, which deploy/ writes with the
// policies' literal; installs from before v0.6 through the ConfigMap
// their DaemonSet refers to, their params' label, or the name.
func TestConditionTypeIsTheSidecars(t *testing.T) {
	flag := []string{"/bin/netready-sidecar", "--state-dir=/run/netready", "--condition-type=$(CONDITION_TYPE)"}
	stale := settings(settingsConfigMap, nil, "example.com/stale")
	oldParams := map[string]string{"netready.io/params": "settings"}
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		// forbidden: the client may not list DaemonSets.
		forbidden bool
		want      string
	}{
		{"v0.6: the DaemonSet's value, whatever netready-settings says", []runtime.Object{stale,
			netreadyDS(flag, corev1.EnvVar{Name: "CONDITION_TYPE", Value: "example.com/net"})}, false, "example.com/net"},
		{"the flag's value in two arguments", []runtime.Object{stale,
			netreadyDS([]string{"/bin/netready-sidecar", "--condition-type", "example.com/split"})}, false, "example.com/split"},
		{"no flag: the sidecar's default", []runtime.Object{stale,
			netreadyDS([]string{"/bin/netready-sidecar"})}, false, publish.DefaultConditionType},
		{"v0.5: the ConfigMap the DaemonSet refers to", []runtime.Object{settings("acme-netready-settings", oldParams, "example.com/v05"), stale,
			netreadyDS(flag, corev1.EnvVar{Name: "CONDITION_TYPE", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "acme-netready-settings"}, Key: "conditionType"}}})},
			false, "example.com/v05"},
		{"a reference the API cannot tell: the settings", []runtime.Object{stale,
			netreadyDS(flag, corev1.EnvVar{Name: "CONDITION_TYPE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})},
			false, "example.com/stale"},
		{"DaemonSets not readable: the settings by their old label", []runtime.Object{settings("acme-netready-settings-x", oldParams, "example.com/labelled"),
			netreadyDS(flag, corev1.EnvVar{Name: "CONDITION_TYPE", Value: "example.com/net"})}, true, "example.com/labelled"},
		{"by name only (v0.3)", []runtime.Object{settings(settingsConfigMap, nil, "example.com/old")}, false, "example.com/old"},
		{"nothing", nil, false, publish.DefaultConditionType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(tc.objs...)
			if tc.forbidden {
				c.PrependReactor("list", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "", nil)
				})
			}
			got, err := conditionType(context.Background(), c, Options{Namespace: DefaultNamespace})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("conditionType (-want +got):\n%s", diff)
			}
		})
	}
}
