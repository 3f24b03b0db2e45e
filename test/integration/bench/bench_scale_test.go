//go:build integration

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// scaleRun is one churn's figures.
type scaleRun struct {
	gated, ungated int
	// latency: marker written -> condition True seen through a watch.
	latency []time.Duration
	// apiCPU, etcdCPU: CPU seconds the processes used during the churn.
	apiCPU, etcdCPU float64
	apiRSS          []float64 // MB, sampled each second
	window          [2]time.Time
	// podEvents, cepEvents: watch events of pods and CiliumEndpoints the
	// API server sent during the churn; ipQueries: the meter's asks of
	// its agent.
	podEvents, cepEvents, ipQueries int
}

// churnOpts say what a churn runs against.
type churnOpts struct {
	// published: the sidecars run, so the churn waits for the conditions.
	published bool
	// cilium: crossNode with Cilium; ADD's markers are pending and each
	// pod gets its CiliumEndpoint.
	cilium *ciliumScale
}

// BenchmarkSidecarsAt100Nodes: one real kube-apiserver and etcd with
// deploy/ applied, 100 Node objects and 100 real netready-sidecar
// processes, each for its own node, scoped as deploy/ runs them (a token
// bound to its own pod; pool watch off: this measures pod publishing). A driver binds pods by
// nodeName at 20 gated and 5 ungated starts a second across the cluster,
// writes the marker ADD would write, and deletes each pod 30 s later, and
// its marker 100 ms after that, as DEL does once kubelet has stopped the
// pod. The same churn runs first without sidecars.
// Requests are attributed to the sidecars by the API server's audit log
// (their user); watch connections come from its /metrics; CPU from /proc.
// Then the scope check's cost: its dry-run writes and watches at start,
// during the churn, and after a change that decides the scope and one
// that does not (bench_scale_scope_test.go).
// Then a third churn with crossNode on, with Cilium (bench_scale_crossnode_test.go):
// ADD's marker is pending, the driver writes each pod's CiliumEndpoint
// as its agent would, one stand-in agent answers the checks, and node
// 0's sidecar measures the propagation, as crossNode.measure would.
// Last, a real kubelet node shows what kubelet itself writes per pod start.
// NETREADY_SCALE_NODES and NETREADY_SCALE_CHURN shorten it.
func BenchmarkSidecarsAt100Nodes(b *testing.B) {
	nodes := 100
	if v, err := strconv.Atoi(os.Getenv("NETREADY_SCALE_NODES")); err == nil && v > 0 {
		nodes = v
	}
	churn := 2 * time.Minute
	if v, err := time.ParseDuration(os.Getenv("NETREADY_SCALE_CHURN")); err == nil && v > 0 {
		churn = v
	}
	dir := b.TempDir()
	audit, auditLog := kube.AuditArgs(b, dir, kube.AgentUser)
	a := kube.StartAPIServer(b, audit...)
	a.Kubectl(b, "apply", "-k", harness.RepoPath("deploy"), "--server-side")
	cfg := a.Config(kube.AdminToken)
	cfg.QPS, cfg.Burst = 500, 1000
	driver := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	names := make([]string, nodes)
	states := make([]string, nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("scale-%03d", i)
		states[i] = filepath.Join(dir, "state", names[i])
		os.MkdirAll(states[i], 0o755)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i]}}
		if i == meterNode {
			node.Labels = map[string]string{agents.MeasureLabel: "true"}
		}
		if _, err := driver.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}

	without := scaleChurn(b, a, driver, names, states, "a", churn, churnOpts{})
	cilium := startCiliumScale(b, a, driver, dir, names[meterNode])

	// The API server idle, before and after the sidecars start: what their
	// watches alone hold, apart from the heap a churn grows.
	idleWithout := sampleRSS(a.KubeAPI.Process.Pid, 20*time.Second)
	watchesBefore, scopeWatchesBefore := podWatches(b, a), scopeWatches(b, a)
	startedAt := time.Now()
	listens := startScopedSidecars(b, a, names, states, cilium.sidecarArgs)
	b.Logf("%d sidecars ready in %.1fs", nodes, time.Since(startedAt).Seconds())
	watches := [2]int{watchesBefore, podWatches(b, a)}
	scopeWatchesOpen := scopeWatches(b, a) - scopeWatchesBefore
	idleWith := sampleRSS(a.KubeAPI.Process.Pid, 20*time.Second)
	with := scaleChurn(b, a, driver, names, states, "b", churn, churnOpts{published: true})
	crossNode := scaleChurn(b, a, driver, names, states, "c", churn, churnOpts{published: true, cilium: cilium})
	crossRows := crossNodeRows(b, auditLog, listens[meterNode], nodes, with, crossNode)

	reqs, byPod := auditCounts(b, auditLog, with.window)
	startup, _ := auditCounts(b, auditLog, [2]time.Time{startedAt, with.window[0]})
	startDry, startLists, startWatches := scopeCounts(sidecarRequests(b, auditLog, [2]time.Time{startedAt, with.window[0]}))
	churnDry, churnLists, churnWatches := scopeCounts(sidecarRequests(b, auditLog, with.window))
	scopeRows := scopeFigures(b, a, auditLog, nodes)
	// Writes about each pod: its status patches and Events, by the pod's
	// name ("b-<i>", ungated when i%5 == 4).
	gatedWrites, ungatedReqs := podWrites(byPod, "b")
	perGated := float64(gatedWrites) / float64(with.gated)
	fmt.Printf("\nThe sidecar at %d nodes: %d gated and %d ungated pod starts in %s (%.0f a second), each pod deleted 30 s after its start; the same churn without sidecars first.\n",
		nodes, with.gated, with.ungated, churn, float64(with.gated+with.ungated)/churn.Seconds())
	fmt.Println("| measure | value | goal | |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| API writes per gated pod start (pods/status patches and Events) | %.3f (%d for %d) | exactly 1 | %s |\n", perGated, gatedWrites, with.gated, metOrMissed(gatedWrites == with.gated))
	fmt.Printf("| requests about ungated pods | %d for %d | 0 | %s |\n", ungatedReqs, with.ungated, metOrMissed(ungatedReqs == 0))
	lists := reqs["list pods"]
	fmt.Printf("| LISTs during the churn | %d (start-up: %d LIST, %d WATCH) | none after start-up but re-lists | %s |\n", lists, startup["list pods"], startup["watch pods"], metOrMissed(lists == 0))
	fmt.Printf("| every sidecar request during the churn | %s | | |\n", formatCounts(reqs))
	fmt.Printf("| marker -> condition, p50 / p99 | %s / %s (%d pods) | | |\n", harness.Ms(harness.Percentile(with.latency, .5)), harness.Ms(harness.Percentile(with.latency, .99)), len(with.latency))
	fmt.Printf("| kube-apiserver CPU during the churn, without / with sidecars | %.1f s / %.1f s (%.2fx) | | |\n", without.apiCPU, with.apiCPU, with.apiCPU/without.apiCPU)
	fmt.Printf("| etcd CPU during the churn, without / with | %.1f s / %.1f s (%.2fx) | | |\n", without.etcdCPU, with.etcdCPU, with.etcdCPU/without.etcdCPU)
	fmt.Printf("| kube-apiserver RSS, mean (max), without / with | %.0f (%.0f) MB / %.0f (%.0f) MB | | |\n", mean(without.apiRSS), slices.Max(without.apiRSS), mean(with.apiRSS), slices.Max(with.apiRSS))
	fmt.Printf("| kube-apiserver RSS idle (mean of 20 s), without / with %d idle sidecars | %.0f MB / %.0f MB: %+.1f MB, %+.2f MB per sidecar | | |\n",
		nodes, mean(idleWithout), mean(idleWith), mean(idleWith)-mean(idleWithout), (mean(idleWith)-mean(idleWithout))/float64(nodes))
	fmt.Printf("| pod watch connections open at the API server, without / with | %d / %d | one per sidecar | %s |\n", watches[0], watches[1], metOrMissed(watches[1]-watches[0] == nodes))
	fmt.Printf("| scope check at start: dry-run writes; lists and watches of policies, bindings, ClusterRoles and ClusterRoleBindings | %d dry-run writes (%.2f per sidecar); %d LIST, %d WATCH | 3 per sidecar | %s |\n",
		startDry, float64(startDry)/float64(nodes), startLists, startWatches, metOrMissed(startDry == 3*nodes))
	fmt.Printf("| scope check during the churn (%s): dry-run writes; their lists and watches | %d (%.3f a second); %d LIST, %d WATCH | 0: no change, and the clock is 30 min | %s |\n",
		churn, churnDry, float64(churnDry)/with.window[1].Sub(with.window[0]).Seconds(), churnLists, churnWatches, metOrMissed(churnDry == 0))
	fmt.Printf("| scope watch connections open at the API server | +%d | four per sidecar | %s |\n", scopeWatchesOpen, metOrMissed(scopeWatchesOpen == 4*nodes))
	for _, row := range append(scopeRows, crossRows...) {
		fmt.Println(row)
	}
	fmt.Printf("| kubelet's pods/status writes per pod start, on a real kubelet node after the churn (pause pods, created to Ready; their deletion apart) | %s | | |\n", kubeletStatusWrites(b))
}

// kubeletStatusWrites brings up a real node (its own API server, so that
// the churn's figures above stay apart), starts pause pods on it in
// batches the node's /28 pool holds, and counts the pods/status writes
// the API server took from creation to Ready, and then for deletion. Only
// kubelet writes pods/status there: the scheduler binds through
// pods/binding.
func kubeletStatusWrites(b *testing.B) string {
	const batches, perBatch = 3, 10
	n := kube.StartNode(b)
	ctx := context.Background()
	var started, deleted int
	for batch := range batches {
		before := n.PodStatusWrites()
		var names []string
		for i := range perBatch {
			names = append(names, fmt.Sprintf("kw-%d-%d", batch, i))
			n.CreatePod(kube.NodePod(names[i], false))
		}
		for _, name := range names {
			n.WaitPod(name, "Ready", 2*time.Minute, func(p *corev1.Pod) bool {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						return true
					}
				}
				return false
			})
		}
		// kubelet may still be writing a status it had queued: let it.
		time.Sleep(3 * time.Second)
		mid := n.PodStatusWrites()
		started += mid - before
		n.Admin.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
		n.WaitFor("every pod gone", 2*time.Minute, func() bool {
			pods, err := n.Admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			return err == nil && len(pods.Items) == 0
		})
		deleted += n.PodStatusWrites() - mid
	}
	pods := batches * perBatch
	return fmt.Sprintf("%.2f (%d for %d pods); deletion %.2f more", float64(started)/float64(pods), started, pods, float64(deleted)/float64(pods))
}

// scaleChurn runs the churn for d and returns its figures once every gated
// pod's condition is seen (or 60 s after the churn).
func scaleChurn(b *testing.B, a *kube.APIServer, driver *kubernetes.Clientset, nodes, states []string, prefix string, d time.Duration, opts churnOpts) scaleRun {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	markerAt := map[string]time.Time{}
	seenAt := map[string]time.Time{}
	// The watch that times publishing runs in both churns, so that both
	// cost the API server the same besides the sidecars.
	{
		w, err := driver.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for ev := range w.ResultChan() {
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				if c := publish.Current(pod, publish.DefaultConditionType); c != nil && c.Status == corev1.ConditionTrue {
					mu.Lock()
					if _, ok := seenAt[pod.Name]; !ok {
						seenAt[pod.Name] = time.Now()
					}
					mu.Unlock()
				}
			}
		}()
	}
	rss := make(chan []float64, 1)
	go func() {
		var samples []float64
		for tick := time.NewTicker(time.Second); ; {
			select {
			case <-ctx.Done():
				rss <- samples
				return
			case <-tick.C:
				samples = append(samples, vmRSS(a.KubeAPI.Process.Pid))
			}
		}
	}()
	type live struct {
		name, path string
		until      time.Time
	}
	// DEL comes as kubelet sends it: once the pod's deletion is out and
	// its containers are stopped, here delAfter after the deletion; then,
	// as kubelet does, the pod is removed for good (grace 0). Without that
	// last step no pod would ever leave: nothing here plays kubelet.
	const delAfter = 100 * time.Millisecond
	var dels []live
	del := func(l live) {
		os.Remove(l.path)
		if opts.cilium != nil {
			opts.cilium.unpublish(context.Background(), "default", l.name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		driver.CoreV1().Pods("default").Delete(ctx, l.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	}
	var alive []live
	var run scaleRun
	apiCPU0, etcdCPU0 := cpuSeconds(a.KubeAPI.Process.Pid), cpuSeconds(a.Etcd.Process.Pid)
	podEvents0, cepEvents0, ipQueries0 := watchEvents(b, a, "pods"), watchEvents(b, a, "ciliumendpoints"), 0
	if opts.cilium != nil {
		ipQueries0 = opts.cilium.agent.IPQueries()
	}
	run.window[0] = time.Now()
	const every = 40 * time.Millisecond // 25 starts a second: 4 gated, 1 ungated
	next := time.Now()
	for i := 0; time.Since(run.window[0]) < d; i++ {
		time.Sleep(time.Until(next))
		next = next.Add(every)
		node := i % len(nodes)
		gated := i%5 != 4
		name := fmt.Sprintf("%s-%d", prefix, i)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: nodes[node], Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}}}
		if gated {
			pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: publish.DefaultConditionType}}
			run.gated++
		} else {
			run.ungated++
		}
		created, err := driver.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		m := cnitest.ReadyMarker("scale", name, created, "10.200.0.5/24")
		if opts.cilium != nil {
			m = opts.cilium.pendingMarker(created, scalePodIP(i))
		}
		now := m.CreatedAt.Time
		store := marker.Store{Dir: states[node]}
		if err := store.Write(m); err != nil {
			b.Fatal(err)
		}
		if opts.cilium != nil {
			if err := opts.cilium.publish(ctx, created, node, scalePodIP(i)); err != nil {
				b.Fatalf("CiliumEndpoint of %s: %v", name, err)
			}
		}
		if gated {
			mu.Lock()
			markerAt[name] = time.Now()
			mu.Unlock()
		}
		path, _ := store.Path(marker.Key{Network: m.Network, ContainerID: m.ContainerID, IfName: m.IfName})
		alive = append(alive, live{name, path, now.Add(30 * time.Second)})
		for len(alive) > 0 && time.Now().After(alive[0].until) {
			driver.CoreV1().Pods("default").Delete(ctx, alive[0].name, metav1.DeleteOptions{})
			dels = append(dels, live{alive[0].name, alive[0].path, time.Now().Add(delAfter)})
			alive = alive[1:]
		}
		for len(dels) > 0 && time.Now().After(dels[0].until) {
			del(dels[0])
			dels = dels[1:]
		}
	}
	run.window[1] = time.Now()
	run.apiCPU, run.etcdCPU = cpuSeconds(a.KubeAPI.Process.Pid)-apiCPU0, cpuSeconds(a.Etcd.Process.Pid)-etcdCPU0
	if opts.published {
		for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
			mu.Lock()
			n := len(seenAt)
			mu.Unlock()
			if n >= run.gated || time.Since(start) > time.Minute {
				break
			}
		}
	}
	// Requests of the churn's pods count until the last is deleted.
	for _, l := range alive {
		driver.CoreV1().Pods("default").Delete(context.Background(), l.name, metav1.DeleteOptions{})
	}
	time.Sleep(delAfter)
	for _, l := range append(dels, alive...) {
		del(l)
	}
	time.Sleep(5 * time.Second)
	run.window[1] = time.Now()
	run.podEvents, run.cepEvents = watchEvents(b, a, "pods")-podEvents0, watchEvents(b, a, "ciliumendpoints")-cepEvents0
	if opts.cilium != nil {
		run.ipQueries = opts.cilium.agent.IPQueries() - ipQueries0
	}
	cancel()
	run.apiRSS = <-rss
	mu.Lock()
	defer mu.Unlock()
	for name, at := range markerAt {
		if seen, ok := seenAt[name]; ok {
			run.latency = append(run.latency, seen.Sub(at))
		}
	}
	slices.Sort(run.latency)
	if opts.published && len(run.latency) < run.gated*9/10 {
		b.Errorf("only %d of %d gated pods' conditions were seen", len(run.latency), run.gated)
	}
	return run
}

// sampleRSS samples a process's RSS (MB) every second for d.
func sampleRSS(pid int, d time.Duration) []float64 {
	var out []float64
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		out = append(out, vmRSS(pid))
	}
	return out
}

// cpuSeconds is the user and system CPU a process has used.
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis; utime and
	// stime are the 14th and 15th of the line, in clock ticks (100 Hz).
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

// podWatches returns the pod watches open at the API server, from its
// apiserver_longrunning_requests.
func podWatches(b *testing.B, a *kube.APIServer) int {
	data, err := a.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("the API server's /metrics: %v", err)
	}
	return kube.SumSeries(string(data), "apiserver_longrunning_requests", `resource="pods"`, `verb="WATCH"`)
}

// auditCounts counts the sidecars' requests in the audit log that the API
// server received within window, by "verb resource[/subresource]", and the
// writes by the pod they are about (a pod's name, or the pod an Event's
// name starts with).
func auditCounts(b *testing.B, path string, window [2]time.Time) (map[string]int, map[string]int) {
	counts, byPod := map[string]int{}, map[string]int{}
	for _, ev := range sidecarRequests(b, path, window) {
		key := ev.Verb + " " + ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			key += "/" + ev.ObjectRef.Subresource
		}
		if c := ev.ResponseStatus.Code; c >= 300 {
			// Refused or failed: apart, with its code.
			key += fmt.Sprintf(" (%d)", c)
		}
		if ev.dryRun() {
			// The scope check's probes: about the sidecar's own pod.
			counts["dry-run "+key]++
			continue
		}
		counts[key]++
		switch {
		case ev.ObjectRef.Resource == "pods" && ev.Verb != "list" && ev.Verb != "watch":
			byPod[ev.ObjectRef.Name]++
		case ev.ObjectRef.Resource == "events":
			if i := strings.LastIndexByte(ev.ObjectRef.Name, '.'); i > 0 {
				byPod[ev.ObjectRef.Name[:i]]++
			}
		}
	}
	return counts, byPod
}

func formatCounts(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
