//go:build integration

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/test/harness/kube"
)

// scopeResources are what the sidecar watches to know when to prove its
// scope again.
var scopeResources = []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings", "clusterroles", "clusterrolebindings"}

// startScopedSidecars starts one sidecar per node as deploy/ runs it:
// --require-scope, with a token bound to its own pod on its node, and
// node i's extra flags; it returns their listen addresses.
func startScopedSidecars(b *testing.B, a *kube.APIServer, nodes, states []string, extra func(i int) []string) (listens []string) {
	for i, node := range nodes {
		self := kube.PlainPod("kube-system", "netready-"+node, node)
		self.Spec.ServiceAccountName = "netready-sidecar"
		self, err := a.Admin.CoreV1().Pods("kube-system").Create(context.Background(), self, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		kubeconfig := a.Kubeconfig("sidecar-"+node, a.BoundToken(b, self))
		listen, _ := kube.StartSidecarWith(b, a, kubeconfig, states[i], node, append([]string{
			"--require-scope", "--pod-namespace", self.Namespace, "--pod-name", self.Name, "--cni-conf-dir", ""}, extra(i)...)...)
		listens = append(listens, listen)
	}
	return listens
}

// auditEvent is what the benchmark reads of the audit log's lines.
type auditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct{ Username string }
	ObjectRef  struct {
		Resource, Subresource, Name string
	} `json:"objectRef"`
	Received       time.Time          `json:"requestReceivedTimestamp"`
	ResponseStatus struct{ Code int } `json:"responseStatus"`
}

// dryRun says whether e is a dry-run write: only the scope check sends
// them.
func (e auditEvent) dryRun() bool { return strings.Contains(e.RequestURI, "dryRun=All") }

// sidecarRequests returns the sidecars' requests that the API server
// received within window: a watch when it starts, any other once done.
func sidecarRequests(b *testing.B, path string, window [2]time.Time) []auditEvent {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.User.Username != kube.AgentUser {
			continue
		}
		if ev.Verb == "watch" && ev.Stage != "ResponseStarted" || ev.Verb != "watch" && ev.Stage != "ResponseComplete" {
			continue
		}
		if ev.Received.Before(window[0]) || ev.Received.After(window[1]) {
			continue
		}
		out = append(out, ev)
	}
	return out
}

// scopeCounts counts, of evs, the dry-run writes, and the lists and
// watches of what decides the scope.
func scopeCounts(evs []auditEvent) (dryRuns, lists, watches int) {
	for _, ev := range evs {
		switch {
		case ev.dryRun():
			dryRuns++
		case slices.Contains(scopeResources, ev.ObjectRef.Resource) && ev.Verb == "list":
			lists++
		case slices.Contains(scopeResources, ev.ObjectRef.Resource) && ev.Verb == "watch":
			watches++
		}
	}
	return dryRuns, lists, watches
}

// apiMetric sums the API server's series of name carrying every label.
func apiMetric(b *testing.B, a *kube.APIServer, name string, labels ...string) int {
	data, err := a.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("the API server's /metrics: %v", err)
	}
	return kube.SumSeries(string(data), name, labels...)
}

// scopeWatches counts the watches of what decides the scope open at the
// API server.
func scopeWatches(b *testing.B, a *kube.APIServer) int {
	n := 0
	for _, r := range scopeResources {
		n += apiMetric(b, a, "apiserver_longrunning_requests", `resource="`+r+`"`, `verb="WATCH"`)
	}
	return n
}

// scopeChange makes change, waits for, and returns the figures of, the
// sidecars' dry-run writes in the window after it: how many, when the
// first and last of the first check and of its confirmation came, and
// the watch events the API server sent of resource.
func scopeChange(b *testing.B, a *kube.APIServer, auditLog, resource string, window time.Duration, change func()) string {
	events0 := apiMetric(b, a, "apiserver_watch_events_total", `resource="`+resource+`"`)
	at := time.Now()
	change()
	time.Sleep(window)
	evs := sidecarRequests(b, auditLog, [2]time.Time{at, time.Now()})
	events := apiMetric(b, a, "apiserver_watch_events_total", `resource="`+resource+`"`) - events0
	var first, confirm []time.Duration
	for _, ev := range evs {
		if !ev.dryRun() {
			continue
		}
		// Settle and spread end by 15 s; the confirmation comes 30 s on.
		if d := ev.Received.Sub(at); d < 20*time.Second {
			first = append(first, d)
		} else {
			confirm = append(confirm, d)
		}
	}
	span := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "0"
		}
		slices.Sort(ds)
		return fmt.Sprintf("%d, from +%.1f s to +%.1f s", len(ds), ds[0].Seconds(), ds[len(ds)-1].Seconds())
	}
	dry, _, _ := scopeCounts(evs)
	return fmt.Sprintf("%d dry-run writes in %s (first check %s; confirmation %s); %d watch events of %s sent", dry, window, span(first), span(confirm), events, resource)
}

// scopeFigures runs, once the churns are over, a change that decides the
// scope (a new ValidatingAdmissionPolicy on pods/status that refuses
// nothing) and one that does not (a ClusterRole and its binding for
// others), and returns their rows.
func scopeFigures(b *testing.B, a *kube.APIServer, auditLog string, nodes int) []string {
	ctx := context.Background()
	relevant := scopeChange(b, a, auditLog, "validatingadmissionpolicies", time.Minute, func() {
		_, err := a.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &admissionv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "bench-audit-pod-status"},
			Spec: admissionv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/status"}}}}}},
				Validations: []admissionv1.Validation{{Expression: "true"}}}}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
	})
	unrelated := scopeChange(b, a, auditLog, "clusterrolebindings", 20*time.Second, func() {
		if _, err := a.Admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bench-deployer"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := a.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bench-deployers"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "bench-deployer"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "bench:deployers"}}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	})
	return []string{
		fmt.Sprintf("| a change that decides the scope (a new policy on pods/status), %d sidecars | %s | 6 per sidecar (two checks of 3) | |", nodes, relevant),
		fmt.Sprintf("| a change that does not (a ClusterRole and its binding for others) | %s | 0 dry-run writes | |", unrelated),
	}
}
