//go:build integration

package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// TestDeployLetsTheSidecarWriteOnlyItsCondition applies deploy/ as users do (kubectl apply -k,
// server-side dry run first), then proves on the real kube-apiserver that
// the sidecar's identity, holding a token bound to its pod on node-a, can
// set its condition on node-a's pods and nothing else through pods/status,
// and that the readiness gate is added exactly where it should be.
func TestDeployLetsTheSidecarWriteOnlyItsCondition(t *testing.T) {
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	a.Kubectl(t, "apply", "-k", "../../../deploy", "--server-side", "--dry-run=server")
	out := a.Kubectl(t, "apply", "-k", "../../../deploy", "--server-side")
	for _, want := range []string{"validatingadmissionpolicy.admissionregistration.k8s.io/netready-sidecar-scope", "validatingadmissionpolicy.admissionregistration.k8s.io/netready-sidecar-node-scope", "mutatingadmissionpolicy.admissionregistration.k8s.io/netready-readiness-gate", "daemonset.apps/netready", "configmap/netready-entry", "clusterrole.rbac.authorization.k8s.io/netready-sidecar"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply -k deploy/ did not apply %s:\n%s", want, out)
		}
	}
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The sidecar's own pod on node-a, and the token kubelet would mint.
	self := kube.PlainPod("kube-system", "netready-abcde", "node-a")
	self.Spec.ServiceAccountName = "netready-sidecar"
	self = a.Create(t, self)
	sidecar := kubernetes.NewForConfigOrDie(a.Config(a.BoundToken(t, self)))
	podA := a.Create(t, kube.PlainPod("default", "web-a", "node-a"))
	podB := a.Create(t, kube.PlainPod("default", "web-b", "node-b"))

	own := func(pod *corev1.Pod) []byte {
		p, _ := publish.Patch(pod.UID, corev1.PodCondition{Type: publish.DefaultConditionType, Status: corev1.ConditionTrue,
			Reason: publish.ReasonProgrammed, LastTransitionTime: metav1.Now()})
		return p
	}
	patch := func(c kubernetes.Interface, pod *corev1.Pod, body []byte) error {
		_, err := c.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
		return err
	}
	// The policy is live once it denies; wait for that, boundedly.
	for start := time.Now(); patch(sidecar, podB, own(podB)) == nil; time.Sleep(200 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatal("the ValidatingAdmissionPolicy never took effect")
		}
		// Undo what got through before the policy was live.
		a.Admin.CoreV1().Pods("default").Patch(ctx, podB.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/status/conditions"}]`), metav1.PatchOptions{}, "status")
	}

	if err := patch(sidecar, podA, own(podA)); err != nil {
		t.Fatalf("the sidecar setting its condition on a pod of its node = %v, want allowed", err)
	}
	staticAgent := kubernetes.NewForConfigOrDie(a.AgentConfig)
	denied := []struct {
		name   string
		client kubernetes.Interface
		pod    *corev1.Pod
		body   []byte
		want   string
	}{
		{"a pod of another node", sidecar, podB, own(podB), "may only write pods of its own node"},
		{"a label through pods/status", sidecar, podA, []byte(`{"metadata":{"labels":{"app":"hijacked"}}}`), "may not change labels"},
		{"an annotation through pods/status", sidecar, podA, []byte(`{"metadata":{"annotations":{"x":"y"}}}`), "may not change labels, annotations"},
		{"another condition", sidecar, podA, []byte(`{"status":{"conditions":[{"type":"example.com/other","status":"True"}]}}`), "may only change the condition"},
		{"the Ready condition", sidecar, podA, []byte(`{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`), "may only change the condition"},
		{"podIP", sidecar, podA, []byte(`{"status":{"podIP":"10.200.1.1","podIPs":[{"ip":"10.200.1.1"}]}}`), "in status"},
		// Fields of 1.34 and later (pod-level resources), which no list
		// of fields named: the policy compares every field but conditions.
		{"the pod's allocatedResources", sidecar, podA, []byte(`{"status":{"allocatedResources":{"cpu":"1"}}}`), "in status"},
		{"the pod's resources", sidecar, podA, []byte(`{"status":{"resources":{"requests":{"cpu":"1"}}}}`), "in status"},
		{"a token without a node claim", staticAgent, podA, own(podA), "no node claim"},
	}
	for _, tt := range denied {
		t.Run("denied: "+tt.name, func(t *testing.T) {
			err := patch(tt.client, tt.pod, tt.body)
			if err == nil || !(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("strategic merge patch of pods/status = %v, want a denial containing %q", err, tt.want)
			}
		})
	}
	t.Run("denied: a full status update (RBAC grants patch only)", func(t *testing.T) {
		cur, _ := a.Admin.CoreV1().Pods("default").Get(ctx, podA.Name, metav1.GetOptions{})
		cur.Labels["app"] = "hijacked"
		if _, err := sidecar.CoreV1().Pods("default").UpdateStatus(ctx, cur, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("UpdateStatus with a label change = %v, want Forbidden", err)
		}
	})
	// Control: pods/status itself lets a label through, for anyone the
	// policy does not match; so the denials above are the policy's doing.
	if err := patch(a.Admin, podB, []byte(`{"metadata":{"labels":{"app":"relabelled"}}}`)); err != nil {
		t.Errorf("the admin's label change through pods/status = %v", err)
	} else if b, _ := a.Admin.CoreV1().Pods("default").Get(ctx, podB.Name, metav1.GetOptions{}); b.Labels["app"] != "relabelled" {
		t.Errorf("pods/status did not carry the label change (labels %v): the control proves nothing", b.Labels)
	}
	// Control: this API server keeps the pod-level resources in status,
	// so their denials above are the policy's doing.
	if err := patch(a.Admin, podB, []byte(`{"status":{"allocatedResources":{"cpu":"1"},"resources":{"requests":{"cpu":"1"}}}}`)); err != nil {
		t.Errorf("the admin setting the pod-level resources = %v", err)
	} else if b, _ := a.Admin.CoreV1().Pods("default").Get(ctx, podB.Name, metav1.GetOptions{}); b.Status.AllocatedResources.Cpu().String() != "1" || b.Status.Resources == nil {
		t.Errorf("the API server dropped the pod-level resources (status %+v): their denials prove nothing", b.Status)
	}
	after, _ := a.Admin.CoreV1().Pods("default").Get(ctx, podA.Name, metav1.GetOptions{})
	if after.Labels["app"] != "web-a" || after.Status.PodIP != "" || len(after.Annotations) != 0 || after.Status.AllocatedResources != nil || after.Status.Resources != nil {
		t.Errorf("pod changed despite the denials: labels %v, podIP %q, annotations %v, status %+v", after.Labels, after.Status.PodIP, after.Annotations, after.Status)
	}
	if c := publish.Current(after, publish.DefaultConditionType); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("the allowed condition is missing: %+v", after.Status.Conditions)
	}

	t.Run("events: only its own, reported as its own node's sidecar", func(t *testing.T) {
		event := func(name, kind, regarding, ns, reason, instance string) *eventsv1.Event {
			return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, EventTime: metav1.NowMicro(),
				ReportingController: "netready-sidecar", ReportingInstance: instance, Action: "Test", Reason: reason, Type: corev1.EventTypeWarning,
				Regarding: corev1.ObjectReference{Kind: kind, APIVersion: "v1", Name: regarding, Namespace: ns}}
		}
		for _, tc := range []struct {
			name    string
			ev      *eventsv1.Event
			allowed bool
		}{
			{"SandboxChanged about a pod", event("e1", "Pod", "web-a", "default", publish.ReasonSandboxChanged, "netready-sidecar-node-a"), true},
			{"NetreadyOff about a pod", event("e-off", "Pod", "web-a", "default", publish.ReasonOff, "netready-sidecar-node-a"), true},
			{"NetreadyConfigInvalid about its own Node", event("e2", "Node", "node-a", "default", "NetreadyConfigInvalid", "netready-sidecar-node-a"), true},
			{"NetreadyPresetNotWriting about its own Node", event("e6", "Node", "node-a", "default", nodewriter.ReasonPresetNotWriting, "netready-sidecar-node-a"), true},
			{"NetreadyInstallBackedOff about its own Node", event("e7", "Node", "node-a", "default", nodewriter.ReasonInstallBackedOff, "netready-sidecar-node-a"), true},
			{"NetreadyStatusInactive about its own Node", event("e8", "Node", "node-a", "default", nodewriter.ReasonStatusInactive, "netready-sidecar-node-a"), true},
			{"about another Node", event("e3", "Node", "node-b", "default", "NetreadyConfigInvalid", "netready-sidecar-node-a"), false},
			{"as another node's sidecar", event("e4", "Pod", "web-a", "default", publish.ReasonProgrammed, "netready-sidecar-node-b"), false},
			{"a reason netready never gives", event("e5", "Pod", "web-a", "default", "Killing", "netready-sidecar-node-a"), false},
		} {
			_, err := sidecar.EventsV1().Events(tc.ev.Namespace).Create(ctx, tc.ev, metav1.CreateOptions{})
			if tc.allowed && err != nil {
				t.Errorf("%s: %v, want allowed", tc.name, err)
			}
			if !tc.allowed && (err == nil || !strings.Contains(err.Error(), "netready-sidecar")) {
				t.Errorf("%s: %v, want denied by netready-sidecar-events", tc.name, err)
			}
		}
		// A plain token of the sidecar's ServiceAccount, bound to no pod:
		// no node claim, so no Event at all, in any namespace.
		for _, ns := range []string{"default", "kube-system"} {
			ev := event("plain-"+ns, "Pod", "web-a", ns, publish.ReasonSandboxChanged, "netready-sidecar-node-a")
			_, err := staticAgent.EventsV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), "no node claim") {
				t.Errorf("a pod Event in %s from a token with no node claim = %v, want refused for it", ns, err)
			}
		}
	})

	t.Run("the real sidecar works under the policy", func(t *testing.T) {
		kc := a.Kubeconfig("bound", a.BoundToken(t, self))
		host := kube.PlainPod("default", "gated-host", "node-a")
		host.Spec.HostNetwork = true
		host.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: publish.DefaultConditionType}}
		host = a.Create(t, host)
		kube.StartSidecarWith(t, a, kc, t.TempDir(), "node-a")
		c := kube.WaitCondition(t, a, "gated-host", 15*time.Second, "True under the policy", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
		if c.Reason != publish.ReasonHostNetwork {
			t.Errorf("condition = %+v", c)
		}
		// True at its first condition: the pod start costs one write, the
		// condition, and no Event (the next subtest's PublishRefused
		// Event shows that the sidecar's Events pass the policy).
		time.Sleep(2 * time.Second)
		if evs := strings.Join(kube.EventsFor(t, a, host), "\n"); strings.Contains(evs, "HostNetwork") {
			t.Errorf("a pod True at its first condition got an Event, a second write per pod start:\n%s", evs)
		}
	})

	t.Run("a condition the policy refuses is not retried at once, and gets one Event", func(t *testing.T) {
		// A sidecar run with a type the policy does not allow: every patch
		// of it is a 403, as with a mistyped --condition-type.
		const other = "example.com/not-in-the-policy"
		kc := a.Kubeconfig("bound", a.BoundToken(t, self))
		p := kube.PlainPod("default", "refused", "node-a")
		p.Spec.HostNetwork = true
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: other}}
		p = a.Create(t, p)
		listen, _ := kube.StartSidecarWith(t, a, kc, t.TempDir(), "node-a", "--condition-type", other)
		evs := strings.Join(kube.EventsFor(t, a, p), "\n")
		if !strings.Contains(evs, "Warning "+publish.ReasonPublishRefused) || !strings.Contains(evs, "netready-sidecar-scope") {
			t.Errorf("events = %q, want a Warning %s naming the policy", evs, publish.ReasonPublishRefused)
		}
		// The work queue's backoff would have tried again four or five
		// times by now; the refusal's is a minute.
		time.Sleep(3 * time.Second)
		m := kube.MetricsText(t, listen)
		for _, want := range []string{"netready_publish_refused_pods 1", `netready_api_errors_total{reason="Forbidden"} 1` + "\n", `netready_publish_refused_total{reason="Forbidden"} 1`} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %q:\n%s", want, harness.GrepLines(m, "netready_"))
			}
		}
		if got := kube.EventsFor(t, a, p); len(got) != 1 {
			t.Errorf("events = %q, want exactly one", got)
		}
	})

	t.Run("readiness gate", func(t *testing.T) {
		for _, ns := range []string{"gated", "plain"} {
			n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
			if ns == "gated" {
				n.Labels = map[string]string{"netready.io/readiness-gate": "enabled"}
			}
			if _, err := a.Admin.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		gates := func(p *corev1.Pod) []string {
			var out []string
			for _, g := range p.Spec.ReadinessGates {
				out = append(out, string(g.ConditionType))
			}
			return out
		}
		// The policy is live once a dry-run create shows the gate.
		for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
			p, err := a.Admin.CoreV1().Pods("gated").Create(ctx, kube.PlainPod("gated", "probe", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil && len(gates(p)) == 1 {
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("the MutatingAdmissionPolicy never took effect: %v", err)
			}
		}
		ours := publish.DefaultConditionType
		withGates := func(p *corev1.Pod, gs ...string) *corev1.Pod {
			for _, g := range gs {
				p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: corev1.PodConditionType(g)})
			}
			return p
		}
		host := kube.PlainPod("gated", "hostnet", "")
		host.Spec.HostNetwork = true
		tests := []struct {
			name string
			pod  *corev1.Pod
			want []string
		}{
			{"labelled namespace", kube.PlainPod("gated", "app", ""), []string{ours}},
			{"already gated", withGates(kube.PlainPod("gated", "already", ""), ours), []string{ours}},
			{"other gates kept", withGates(kube.PlainPod("gated", "others", ""), "example.com/lb-ready"), []string{"example.com/lb-ready", ours}},
			{"hostNetwork", host, nil},
			{"unlabelled namespace", kube.PlainPod("plain", "app", ""), nil},
			{"Windows by spec.os", func() *corev1.Pod {
				p := kube.PlainPod("gated", "win-os", "")
				p.Spec.OS = &corev1.PodOS{Name: corev1.Windows}
				return p
			}(), nil},
			{"Windows by node selector", func() *corev1.Pod {
				p := kube.PlainPod("gated", "win-sel", "")
				p.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "windows"}
				return p
			}(), nil},
			{"Linux by node selector", func() *corev1.Pod {
				p := kube.PlainPod("gated", "linux-sel", "")
				p.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
				return p
			}(), []string{ours}},
		}
		for _, tt := range tests {
			got := gates(a.Create(t, tt.pod))
			if !slices.Equal(got, tt.want) {
				t.Errorf("%s: readiness gates = %v, want %v", tt.name, got, tt.want)
			}
		}
	})
}

// overlayOf writes an operator's kustomization of deploy/ with lines
// besides its resources, in which {{deploy}} is deploy/'s path from it,
// and returns its folder.
func overlayOf(t *testing.T, lines string) string {
	t.Helper()
	deploy, err := filepath.Abs("../../../deploy")
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	// kustomize takes no absolute resource path.
	rel, err := filepath.Rel(overlay, deploy)
	if err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%q]\n%s", rel, strings.ReplaceAll(lines, "{{deploy}}", rel))
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return overlay
}

// TestDeployOverlay applies an operator's overlay of deploy/ that moves
// netready to another namespace and runs another condition type, both set
// once (namespace:, and netready-settings with components/condition-type,
// as the README says). On the real kube-apiserver the gate injected, the
// condition the moved sidecar may write and the DaemonSet's flag must all
// follow; netready-settings is no input once applied: deleting it changes
// nothing.
func TestDeployOverlay(t *testing.T) {
	const ns, custom = "netready-system", "example.com/net-ready"
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	overlay := overlayOf(t, fmt.Sprintf(`namespace: %s
components: ["{{deploy}}/components/condition-type"]
configMapGenerator:
  - name: netready-settings
    namespace: kube-system
    behavior: merge
    literals: [conditionType=%s]
`, ns, custom))
	a.CreateNamespaces(t, ns)
	// The harness applied deploy/rbac.yaml for kube-system; this apply takes
	// its binding over, as an operator moving netready would.
	a.Kubectl(t, "apply", "-k", overlay, "--server-side", "--force-conflicts")

	t.Run("the DaemonSet passes the settings' type to the sidecar", func(t *testing.T) {
		ds, err := a.Admin.AppsV1().DaemonSets(ns).Get(ctx, "netready", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm, err := a.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "netready-settings", metav1.GetOptions{})
		if err != nil || cm.Data["conditionType"] != custom {
			t.Fatalf("netready-settings in %s = %v, %v; want conditionType %s", ns, cm, err, custom)
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name != "sidecar" {
				continue
			}
			if !slices.Contains(c.Command, "--condition-type=$(CONDITION_TYPE)") {
				t.Errorf("sidecar command %v lacks --condition-type=$(CONDITION_TYPE)", c.Command)
			}
			// In the pod template itself, so that a new type rolls it.
			i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "CONDITION_TYPE" })
			if i < 0 || c.Env[i].ValueFrom != nil || c.Env[i].Value != custom {
				t.Errorf("sidecar env %+v: want CONDITION_TYPE=%s", c.Env, custom)
			}
		}
	})

	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	self := kube.PlainPod(ns, "netready-abcde", "node-a")
	self.Spec.ServiceAccountName = "netready-sidecar"
	self = a.Create(t, self)
	sidecar := kubernetes.NewForConfigOrDie(a.Config(a.BoundToken(t, self)))
	pod := a.Create(t, kube.PlainPod("default", "web", "node-a"))
	cond := func(typ string) []byte {
		p, _ := publish.Patch(pod.UID, corev1.PodCondition{Type: corev1.PodConditionType(typ), Status: corev1.ConditionTrue,
			Reason: publish.ReasonProgrammed, LastTransitionTime: metav1.Now()})
		return p
	}
	patch := func(c kubernetes.Interface, body []byte) error {
		_, err := c.CoreV1().Pods("default").Patch(ctx, pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
		return err
	}
	// Live once the moved sidecar is refused the default type.
	for start := time.Now(); patch(sidecar, cond(publish.DefaultConditionType)) == nil; time.Sleep(200 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the scope policy never applied to the sidecar in %s", ns)
		}
		a.Admin.CoreV1().Pods("default").Patch(ctx, pod.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/status/conditions"}]`), metav1.PatchOptions{}, "status")
	}
	t.Run("the moved sidecar may write the settings' type and nothing else", func(t *testing.T) {
		if err := patch(sidecar, cond(custom)); err != nil {
			t.Errorf("the sidecar setting %s = %v, want allowed", custom, err)
		}
		err := patch(sidecar, cond(publish.DefaultConditionType))
		if err == nil || !strings.Contains(err.Error(), "may only change the condition "+custom) {
			t.Errorf("the sidecar setting the default type = %v, want a denial naming %s", err, custom)
		}
		if err := patch(sidecar, []byte(`{"metadata":{"labels":{"app":"hijacked"}}}`)); err == nil {
			t.Error("the sidecar changed a label through pods/status")
		}
	})

	gates := func(p *corev1.Pod) (out []string) {
		for _, g := range p.Spec.ReadinessGates {
			out = append(out, string(g.ConditionType))
		}
		return out
	}
	t.Run("the injected gate is the settings' type", func(t *testing.T) {
		var got []string
		for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
			p, err := a.Admin.CoreV1().Pods("gated").Create(ctx, kube.PlainPod("gated", "probe", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil {
				if got = gates(p); len(got) > 0 {
					break
				}
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("the MutatingAdmissionPolicy never took effect: %v", err)
			}
		}
		if !slices.Equal(got, []string{custom}) {
			t.Errorf("readiness gates = %v, want [%s]", got, custom)
		}
		already := kube.PlainPod("gated", "already", "")
		already.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: custom}}
		if got := gates(a.Create(t, already)); !slices.Equal(got, []string{custom}) {
			t.Errorf("a pod already gated on %s: gates = %v, want it once", custom, got)
		}
	})

	t.Run("netready-settings deleted, nothing changes", func(t *testing.T) {
		if err := a.Admin.CoreV1().ConfigMaps(ns).Delete(ctx, "netready-settings", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// v0.5's policies saw it go within about a second.
		for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(500 * time.Millisecond) {
			p, err := a.Admin.CoreV1().Pods("gated").Create(ctx, kube.PlainPod("gated", "probe", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil || !slices.Equal(gates(p), []string{custom}) {
				t.Fatalf("a pod created with netready-settings gone: %v, %v; want the gate %s", p, err, custom)
			}
			if err := patch(sidecar, cond(custom)); err != nil {
				t.Fatalf("the sidecar's own write with netready-settings gone = %v, want allowed", err)
			}
			if err := patch(sidecar, []byte(`{"metadata":{"labels":{"app":"hijacked"}}}`)); err == nil {
				t.Fatal("the sidecar changed a label through pods/status with netready-settings gone")
			}
		}
	})
}
