package explain

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/publish"
)

// oldSettingsLabel is how netready-settings was found before v0.6, when
// it was the admission policies' params.
const oldSettingsLabel = "netready.io/params=settings"

// conditionType is the type netready's sidecar publishes: the
// --condition-type of the sidecar container of netready's DaemonSet,
// found by its label (a namePrefix renames it, not its labels). That flag
// is what the sidecar reads, and deploy/ writes the admission policies'
// type from the same value. Installs from before v0.6 may give it through
// a ConfigMap reference, which is followed; where no DaemonSet says (or
// this client may not read them), netready-settings says, by its old
// label and then by its name; else the default.
func conditionType(ctx context.Context, c kubernetes.Interface, o Options) (string, error) {
	list, err := c.AppsV1().DaemonSets(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector})
	switch {
	case apierrors.IsForbidden(err):
		// The settings may still be readable.
	case err != nil:
		return "", fmt.Errorf("list netready's DaemonSets in %s: %w", o.Namespace, err)
	default:
		slices.SortFunc(list.Items, func(a, b appsv1.DaemonSet) int { return strings.Compare(a.Name, b.Name) })
		for _, ds := range list.Items {
			t, err := templateType(ctx, c, o.Namespace, &ds.Spec.Template.Spec)
			if err != nil {
				return "", fmt.Errorf("the condition type of DaemonSet %s/%s: %w", o.Namespace, ds.Name, err)
			}
			if t != "" {
				return t, nil
			}
		}
	}
	return settingsType(ctx, c, o)
}

// varRef is a Kubernetes variable reference in a container's command.
var varRef = regexp.MustCompile(`\$\(([-._a-zA-Z0-9]+)\)`)

// templateType is the --condition-type a pod template's sidecar runs
// with: the default when the flag is absent, "" when the template has no
// sidecar container or the value cannot be told from the API alone.
func templateType(ctx context.Context, c kubernetes.Interface, namespace string, spec *corev1.PodSpec) (string, error) {
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == sidecarContainer })
	if i < 0 {
		return "", nil
	}
	ctr := spec.Containers[i]
	args := slices.Concat(ctr.Command, ctr.Args)
	value, found := "", false
	for j, a := range args {
		name, v, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "condition-type" {
			continue
		}
		if !inline && j+1 < len(args) {
			v = args[j+1]
		}
		value, found = v, true
	}
	if !found {
		return publish.DefaultConditionType, nil
	}
	var err error
	unknown := false
	value = varRef.ReplaceAllStringFunc(value, func(ref string) string {
		name := varRef.FindStringSubmatch(ref)[1]
		k := slices.IndexFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		switch {
		case k < 0:
			return ref // kubelet leaves an unknown reference as it is
		case ctr.Env[k].ValueFrom == nil:
			return ctr.Env[k].Value
		case ctr.Env[k].ValueFrom.ConfigMapKeyRef != nil:
			ref := ctr.Env[k].ValueFrom.ConfigMapKeyRef
			cm, gerr := c.CoreV1().ConfigMaps(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if gerr != nil {
				if !apierrors.IsNotFound(gerr) && !apierrors.IsForbidden(gerr) {
					err = fmt.Errorf("read ConfigMap %s/%s: %w", namespace, ref.Name, gerr)
				}
				unknown = true
				return ""
			}
			return cm.Data[ref.Key]
		}
		unknown = true
		return ""
	})
	if err != nil || unknown || value == "" {
		return "", err
	}
	return value, nil
}

// settingsType is the type netready-settings names, found by its label
// from before v0.6, then by its name; else the default.
func settingsType(ctx context.Context, c kubernetes.Interface, o Options) (string, error) {
	list, err := c.CoreV1().ConfigMaps(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: oldSettingsLabel})
	if err != nil {
		return "", fmt.Errorf("list ConfigMaps %s in %s: %w", oldSettingsLabel, o.Namespace, err)
	}
	for _, cm := range list.Items {
		if t := cm.Data["conditionType"]; t != "" {
			return t, nil
		}
	}
	cm, err := c.CoreV1().ConfigMaps(o.Namespace).Get(ctx, settingsConfigMap, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return publish.DefaultConditionType, nil
	case err != nil:
		return "", fmt.Errorf("read %s/%s: %w", o.Namespace, settingsConfigMap, err)
	case cm.Data["conditionType"] != "":
		return cm.Data["conditionType"], nil
	}
	return publish.DefaultConditionType, nil
}
