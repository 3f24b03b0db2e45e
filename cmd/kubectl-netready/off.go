package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/spf13/cobra"

	"github.com/netready/netready/pkg/explain"
	"github.com/netready/netready/pkg/offswitch"
)

// policyHelp is --policy's help, for the commands that read or turn the
// policy's off matchCondition.
const policyHelp = "the MutatingAdmissionPolicy that adds the readiness gate (default: " + explain.DefaultPolicy +
	", else the one policy whose name holds it, as a kustomize namePrefix or nameSuffix makes it)"

// offCmd and onCmd turn the off switch on and off (package offswitch).
func offCmd(fl *flags) *cobra.Command {
	return switchCmd(fl, true, &cobra.Command{
		Use:   "off",
		Short: "switch netready off in an incident: no new gates, gated pods released, ADD waits on nothing",
		Long: `off switches netready off, within 30 s on every node: the mutating policy
adds no readiness gate to new pods (matchCondition ` + offswitch.MatchCondition + `), every node's
sidecar releases the gated pods of its node (condition True, reason
NetreadyOff, one Warning Event each), and the plugin's ADD returns at once,
waiting on no check. It creates the ConfigMap ` + offswitch.ConfigMapName + ` in netready's
namespace; helm's offSwitch=true does the same. kubectl netready on undoes it.

Under a kustomize namePrefix, nameSuffix or namespace override, give the
namespace with --netready-namespace; the policy is found by its name
(the one whose name holds netready-readiness-gate), or give it with
--policy.

Idempotent. Exit status: 0 when done, 2 on a usage error or when the API
cannot answer.`,
	})
}

func onCmd(fl *flags) *cobra.Command {
	return switchCmd(fl, false, &cobra.Command{
		Use:   "on",
		Short: "undo kubectl netready off: new pods gated and checked again",
		Long: `on undoes kubectl netready off: it deletes the ConfigMap ` + offswitch.ConfigMapName + ` and the
mutating policy's ` + offswitch.MatchCondition + ` matchCondition. Within 30 s new pods get the gate
again and ADD waits on its checks; a True given while off stays, and
attachments ADD did not wait on are re-checked by the sidecar.

Idempotent. Exit status: 0 when done, 2 on a usage error or when the API
cannot answer.`,
	})
}

func switchCmd(fl *flags, off bool, cmd *cobra.Command) *cobra.Command {
	var policy string
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unexpected arguments %q: %s takes none", args, cmd.Name())
		}
		return nil
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := fl.check(); err != nil {
			return err
		}
		client, err := fl.client()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), fl.timeout)
		defer cancel()
		if err := turn(ctx, cmd.OutOrStdout(), client, fl.netreadyNS, policy, off); err != nil {
			return failure{err}
		}
		return nil
	}
	cmd.Flags().StringVar(&policy, "policy", "", policyHelp)
	return cmd
}

// turn sets the switch: the ConfigMap for the sidecars, the matchCondition
// for the policy. It says what it did, and what it did not need to. The
// policy is found first, so that a policy it cannot tell changes nothing;
// one it may not read still leaves the ConfigMap turned, the sidecars'
// part, and then fails.
func turn(ctx context.Context, w io.Writer, c kubernetes.Interface, namespace, policy string, off bool) error {
	p, perr := explain.GatePolicy(ctx, c, policy)
	if perr != nil && !apierrors.IsForbidden(perr) {
		return perr
	}
	cms := c.CoreV1().ConfigMaps(namespace)
	ref := namespace + "/" + offswitch.ConfigMapName
	if off {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: offswitch.ConfigMapName, Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "netready"}},
			Data: map[string]string{"reason": "kubectl netready off"}}
		switch _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); {
		case err == nil:
			fmt.Fprintf(w, "ConfigMap %s created: the sidecars release every gated pod (True, reason NetreadyOff) and ADD waits on no check\n", ref)
		case apierrors.IsAlreadyExists(err):
			fmt.Fprintf(w, "ConfigMap %s is there already\n", ref)
		default:
			return fmt.Errorf("create ConfigMap %s: %w", ref, err)
		}
	} else {
		switch err := cms.Delete(ctx, offswitch.ConfigMapName, metav1.DeleteOptions{}); {
		case err == nil:
			fmt.Fprintf(w, "ConfigMap %s deleted: the sidecars judge new pods again and ADD waits on its checks\n", ref)
		case apierrors.IsNotFound(err):
			fmt.Fprintf(w, "ConfigMap %s is not there\n", ref)
		default:
			return fmt.Errorf("delete ConfigMap %s: %w", ref, err)
		}
	}
	if perr != nil {
		return fmt.Errorf("the ConfigMap is turned, the mutating policy is not: %w", perr)
	}
	if err := turnPolicy(ctx, w, c, p, policy, off); err != nil {
		return err
	}
	// The sidecars follow the ConfigMap of their own namespace: one in
	// another turns nothing. No DaemonSet may also be the incident itself
	// (kubectl delete ds), so it is said, not refused.
	switch ds, err := c.AppsV1().DaemonSets(namespace).List(ctx, metav1.ListOptions{LabelSelector: explain.Selector}); {
	case err == nil && len(ds.Items) == 0:
		fmt.Fprintf(w, "warning: no netready DaemonSet (label %s) in namespace %s: the sidecars follow %s in their own namespace; "+
			"if netready runs in another, run this again with --netready-namespace\n", explain.Selector, namespace, offswitch.ConfigMapName)
	case err != nil && !apierrors.IsForbidden(err):
		return fmt.Errorf("list netready's DaemonSets in %s: %w", namespace, err)
	}
	if off {
		fmt.Fprintln(w, "netready is off: within 30 s on every node with a running sidecar (the sidecars' watch). Undo: kubectl netready on")
	} else {
		fmt.Fprintln(w, "netready is on: within 30 s on every node with a running sidecar; a True given while off stays")
	}
	return nil
}

// turnPolicy adds or removes the policy's off matchCondition, by JSON
// patch with a test of what it read, so that a concurrent edit is never
// overwritten.
func turnPolicy(ctx context.Context, w io.Writer, c kubernetes.Interface, p *admissionv1.MutatingAdmissionPolicy, name string, off bool) error {
	switch {
	case p == nil && name != "":
		fmt.Fprintf(w, "MutatingAdmissionPolicy %s not found (a cluster before 1.36, or components/no-mutating-policy): gates in pod specs stay, and are released while off\n", name)
		return nil
	case p == nil:
		fmt.Fprintf(w, "no MutatingAdmissionPolicy %s, nor one whose name holds it (a cluster before 1.36, or components/no-mutating-policy): "+
			"gates in pod specs stay, and are released while off; if netready's policy has another name, give it with --policy\n", explain.DefaultPolicy)
		return nil
	}
	name = p.Name
	policies := c.AdmissionregistrationV1().MutatingAdmissionPolicies()
	i := slices.IndexFunc(p.Spec.MatchConditions, func(m admissionv1.MatchCondition) bool { return m.Name == offswitch.MatchCondition })
	var ops []map[string]any
	switch {
	case off && i >= 0, !off && i < 0:
		fmt.Fprintf(w, "MutatingAdmissionPolicy %s: matchCondition %s %s already\n", name, offswitch.MatchCondition, map[bool]string{true: "there", false: "absent"}[off])
		return nil
	case off && len(p.Spec.MatchConditions) == 0:
		ops = []map[string]any{{"op": "add", "path": "/spec/matchConditions", "value": []any{}}}
		fallthrough
	case off:
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/matchConditions/-",
			"value": admissionv1.MatchCondition{Name: offswitch.MatchCondition, Expression: "false"}})
	default:
		path := fmt.Sprintf("/spec/matchConditions/%d", i)
		ops = []map[string]any{{"op": "test", "path": path + "/name", "value": offswitch.MatchCondition}, {"op": "remove", "path": path}}
	}
	ops = append([]map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": p.ResourceVersion}}, ops...)
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	if _, err := policies.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch MutatingAdmissionPolicy %s: %w", name, err)
	}
	if off {
		fmt.Fprintf(w, "MutatingAdmissionPolicy %s: matchCondition %s added: no new pod gets the gate\n", name, offswitch.MatchCondition)
	} else {
		fmt.Fprintf(w, "MutatingAdmissionPolicy %s: matchCondition %s removed: new pods get the gate again\n", name, offswitch.MatchCondition)
	}
	return nil
}
