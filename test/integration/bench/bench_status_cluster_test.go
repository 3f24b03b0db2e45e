//go:build integration

package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// BenchmarkStatusAt1000Nodes: the real kubectl-netready's `status`
// against a real kube-apiserver and etcd holding 1,000 Nodes and 30,000
// pods bound by nodeName (a ready netready pod per node, and 29 workload
// pods per node, one in five gated and waiting). The baseline is the query
// pattern status had before, timed directly: its three lists, then one
// pod list per node, with client-go's default rate limit (5 a second,
// burst 10), and again without a limit. Last, explain of an unscheduled
// pod, which used to list every node's pods too. Goal: status under 5 s.
func BenchmarkStatusAt1000Nodes(b *testing.B) {
	const nodes, perNode = 1000, 29
	a := kube.StartAPIServer(b)
	cfg := a.Config(kube.AdminToken)
	cfg.QPS, cfg.Burst = -1, 0
	fast := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	start := time.Now()
	parallel(b, nodes, func(i int) error {
		_, err := fast.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode(i),
			Labels: map[string]string{corev1.LabelHostname: benchNode(i), corev1.LabelOSStable: "linux"}}}, metav1.CreateOptions{})
		return err
	})
	parallel(b, nodes, func(i int) error {
		p, err := fast.CoreV1().Pods("kube-system").Create(ctx, netreadyBenchPod(benchNode(i)), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		_, err = fast.CoreV1().Pods("kube-system").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	parallel(b, nodes*perNode, func(i int) error {
		_, err := fast.CoreV1().Pods("default").Create(ctx, workloadPod(i, benchNode(i%nodes), (i/nodes)%5 == 0), metav1.CreateOptions{})
		return err
	})
	if _, err := fast.CoreV1().Pods("default").Create(ctx, workloadPod(-1, "", true), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d Nodes and %d pods created in %.1fs", nodes, nodes*(perNode+1)+1, time.Since(start).Seconds())

	b.ResetTimer()
	limited := oldStatusQueries(b, kubernetes.NewForConfigOrDie(a.Config(kube.AdminToken)))
	unlimited := oldStatusQueries(b, fast)
	kc := a.Kubeconfig("admin", kube.AdminToken)
	var runs []time.Duration
	var out string
	for range 3 {
		d, o := timeCLI(b, kc, 0, "status")
		runs = append(runs, d)
		out = o
	}
	if lines := strings.Count(out, "\n"); lines != nodes+1 {
		b.Errorf("status printed %d lines, want a header and %d nodes:\n%s", lines, nodes, harness.Tail(out, 10))
	}
	// node-0007: its ready netready pod, not tainted, 6 gated pods wait.
	want := []string{benchNode(7), "netready-" + benchNode(7), "v0.0.0-bench", "true", "false", fmt.Sprint((perNode + 4) / 5)}
	found := false
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == len(want)+1 && slices.Equal(f[:len(want)], want) {
			found = true
		}
	}
	if !found {
		b.Errorf("status has no line %q:\n%s", want, harness.Tail(out, 10))
	}
	explainRun, explainOut := timeCLI(b, kc, 1, "explain", "unscheduled")
	if !strings.Contains(explainOut, "pod default/unscheduled is not scheduled") {
		b.Errorf("explain unscheduled:\n%s", explainOut)
	}
	b.StopTimer()

	// b.Logf keeps the table in the test log's filtered view too.
	b.Logf("`kubectl netready status` at %d Nodes and %d pods (real kube-apiserver and etcd on this machine):", nodes, nodes*(perNode+1)+1)
	b.Logf("| run | time | goal | |")
	b.Logf("|---|---|---|---|")
	b.Logf("| before: the old queries, a pod list per node, client-go's default limit (5/s, burst 10) | %.1f s | | |", limited.Seconds())
	b.Logf("| before: the same queries, no client limit | %.1f s | | |", unlimited.Seconds())
	b.Logf("| now: `kubectl-netready status`, 3 runs | %s | < 5 s | %s |", seconds(runs), metOrMissed(slices.Max(runs) < 5*time.Second))
	b.Logf("| now: `kubectl-netready explain` of an unscheduled pod | %.2f s | | |", explainRun.Seconds())
}

func benchNode(i int) string { return fmt.Sprintf("node-%04d", i) }

// parallel runs fn for 0..n-1 on 32 workers.
func parallel(b *testing.B, n int, fn func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(func() (all []error) {
		for err := range errs {
			all = append(all, err)
		}
		return
	}()...); err != nil {
		b.Fatal(err)
	}
}

func netreadyBenchPod(node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "netready-" + node, Labels: map[string]string{"app": "netready"}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "netready-sidecar", Containers: []corev1.Container{
			{Name: "sidecar", Image: "ghcr.io/netready/netready:v0.0.0-bench", Args: []string{"--node-name=$(NODE_NAME)"}}}}}
}

// workloadPod is a pod about the size of a small Deployment's, bound to
// node ("" leaves it unscheduled).
func workloadPod(i int, node string, gated bool) *corev1.Pod {
	name := fmt.Sprintf("app-%05d", i)
	if i < 0 {
		name = "unscheduled"
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels:      map[string]string{"app": "shop", "tier": "web", "pod-template-hash": "5d8f7c9b4"},
		Annotations: map[string]string{"kubectl.kubernetes.io/default-container": "app"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/shop/web:1.4.2",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			Env:   []corev1.EnvVar{{Name: "MODE", Value: "production"}, {Name: "LOG_LEVEL", Value: "info"}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}}}}
	if gated {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: publish.DefaultConditionType}}
	}
	return p
}

// oldStatusQueries times the requests status made before: nodes,
// netready's pods, Node Events, then each node's pods in series.
func oldStatusQueries(b *testing.B, c kubernetes.Interface) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=netready"}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.EventsV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "regarding.kind=Node"}); err != nil {
		b.Fatal(err)
	}
	for _, n := range nodes.Items {
		if _, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String()}); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// timeCLI runs the real kubectl-netready and times it; it must exit code.
func timeCLI(b *testing.B, kubeconfig string, code int, args ...string) (time.Duration, string) {
	b.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(harness.BinDir, "kubectl-netready"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	got := 0
	if ee, ok := err.(*exec.ExitError); ok {
		got = ee.ExitCode()
	} else if err != nil {
		b.Fatal(err)
	}
	if got != code {
		b.Errorf("kubectl-netready %s: exit %d, want %d; stderr:\n%s", strings.Join(args, " "), got, code, harness.Tail(stderr.String(), 10))
	}
	return d, stdout.String()
}

func seconds(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = fmt.Sprintf("%.2f", d.Seconds())
	}
	return strings.Join(s, ", ") + " s"
}
