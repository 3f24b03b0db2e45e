//go:build integration

package bench

import (
	"fmt"
	"maps"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/kube"
)

// BenchmarkCrossNodeCilium: on two real cilium-agents in native routing
// (no lag), gated client pods on node A start one after another, ABAB
// with crossNode on and off, node A's real sidecar holding their gate.
// Per arm: ADD; Ready (the condition's True, polled every 5 ms) after ADD
// returned; and node B's agent learning the pod (its ipcache, polled
// every 2 ms), as Ready less that moment: positive when B had it first.
// The sidecar's requests per pod start come from the API server's audit
// log: pods/status patches, and CiliumEndpoint reads. Node B's sidecar
// measures the propagation meanwhile (its meter); a third arm then runs
// with crossNode's settle at the p99 it measured.
func BenchmarkCrossNodeCilium(b *testing.B) {
	pods := 20
	if v, err := strconv.Atoi(os.Getenv("NETREADY_BENCH_ADDS")); err == nil {
		pods = min(max(v/2, 2), 50)
	}
	args, audit := kube.AuditArgs(b, b.TempDir(), kube.AgentUser)
	bed := agents.StartCiliumCrossNodeBed(b, args...)
	bed.API.ApplyRBAC(harness.RepoPath("deploy", "components", "cilium", "rbac.yaml"))
	kube.StartSidecar(b, bed.API, bed.State, agents.CiliumNodeA)
	meterB := bed.StartMeter(b)
	entry := map[string]any{"type": "netready", "stateDir": bed.State, "timeout": "20s", "onTimeout": "fail", "logFile": bed.Log,
		"checks": []any{map[string]any{"kind": "address"}, map[string]any{"kind": "http", "preset": "cilium", "url": "unix://" + bed.A.Sock}}}
	off := bed.Chain(entry)
	withXN := maps.Clone(entry)
	withXN["crossNode"] = map[string]any{}
	on := bed.Chain(withXN)
	// The first app=web pod allocates the identity, which B learns once.
	if _, _, _, err := bed.AddGated(off, "warm", "web"); err != nil {
		b.Fatalf("ADD warm: %v", err)
	}
	arms := map[string]*ciliumArm{"on": {}, "off": {}, "settle": {}}
	window := [2]time.Time{time.Now(), {}}
	for i := range 2 * pods {
		arm, list := "off", off
		if i%2 == 0 {
			arm, list = "on", on
		}
		arms[arm].start(b, bed, list, fmt.Sprintf("x-%d", i))
	}
	window[1] = time.Now()
	// The statistical wait, sized from what B's sidecar measured meanwhile:
	// settle at its p99 (a bucket's bound).
	measured := kube.ScrapeHistogram(b, meterB, "netready_cilium_propagation_seconds")
	settle := time.Duration(max(measured.Quantile(.99), 0.001) * float64(time.Second))
	withSettle := maps.Clone(entry)
	withSettle["crossNode"] = map[string]any{"settle": settle.String()}
	settled := bed.Chain(withSettle)
	for i := range pods {
		arms["settle"].start(b, bed, settled, fmt.Sprintf("s-%d", i))
	}
	// The audit log is written a little after each request.
	time.Sleep(2 * time.Second)
	patches, reads := 0, 0
	for _, ev := range sidecarRequests(b, audit, window) {
		switch {
		case ev.ObjectRef.Resource == "pods" && ev.ObjectRef.Subresource == "status" && ev.Verb == "patch":
			patches++
		case ev.ObjectRef.Resource == "ciliumendpoints" && ev.Verb == "get":
			reads++
		}
	}
	p := func(d []time.Duration) string {
		return fmt.Sprintf("p50 %s p99 %s", harness.Ms(harness.Percentile(d, .5)), harness.Ms(harness.Percentile(d, .99)))
	}
	for _, name := range []string{"on", "off", "settle"} {
		a := arms[name]
		what := map[string]string{"on": `crossNode {}`, "off": "crossNode off", "settle": fmt.Sprintf("crossNode {settle: %s} (B's measured p99), after the ABAB", settle)}[name]
		fmt.Printf("cross-node Cilium (2 agents, native routing, %d pods per arm, ABAB), %s: ADD %s; Ready after ADD returned %s; Ready after B's agent learned the pod %s (negative: Ready first); Ready before B learned: %d of %d; first connections right after ADD: %d of %d\n",
			pods, what, p(a.add), p(a.ready), p(a.lead), a.readyFirst(), len(a.lead), a.first, pods)
	}
	fmt.Printf("cross-node Cilium: B's meter over the ABAB (%d remote pods): %d observed, mean %s, p50 <= %gs, p99 <= %gs (bucket bounds)\n",
		2*pods+1, measured.Count, harness.Ms(time.Duration(measured.Sum/float64(max(measured.Count, 1))*float64(time.Second))), measured.Quantile(.5), measured.Quantile(.99))
	fmt.Printf("cross-node Cilium: the sidecar's requests over %d gated pod starts: %d pods/status patches (%.2f per pod), %d CiliumEndpoint reads (%.2f per crossNode pod)\n",
		2*pods, patches, float64(patches)/float64(2*pods), reads, float64(reads)/float64(pods))
}

// ciliumArm is what one arm of the bench measured per pod start.
type ciliumArm struct {
	add, ready, lead []time.Duration
	first            int
}

// start starts the gated pod name with list on node A, connects right
// after ADD, and records ADD, Ready after ADD returned, and Ready after
// B's agent learned the pod.
func (a *ciliumArm) start(b *testing.B, bed *agents.CiliumCrossNodeBed, list *libcni.NetworkConfigList, name string) {
	rt, ip, took, err := bed.AddGated(list, name, "web")
	returned := time.Now()
	if err != nil {
		b.Fatalf("ADD %s: %v", name, err)
	}
	learned := watchIdentity(bed, ip)
	if bed.Connect(rt) == nil {
		a.first++
	}
	at := readyAt(b, bed.API, name)
	l := learned()
	if l.IsZero() {
		b.Fatalf("node B never learned %s (%s) within 30 s", name, ip)
	}
	a.add, a.ready, a.lead = append(a.add, took), append(a.ready, at.Sub(returned)), append(a.lead, at.Sub(l))
}

// readyFirst counts the pods that were Ready before B's agent had them.
func (a *ciliumArm) readyFirst() int {
	n := 0
	for _, l := range a.lead {
		if l < 0 {
			n++
		}
	}
	return n
}

// watchIdentity polls node B's ipcache for ip in the background; the
// function it returns waits (at most 30 s) and gives when B first had an
// identity for it other than the world's, zero if never.
func watchIdentity(bed *agents.CiliumCrossNodeBed, ip string) func() time.Time {
	var at time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if id, err := bed.B.Identity(ip); err == nil && id > 2 {
				at = time.Now()
				return
			}
		}
	}()
	return func() time.Time {
		<-done
		return at
	}
}

// readyAt polls the pod's condition every 5 ms and returns when it was
// first seen True.
func readyAt(b *testing.B, a *kube.APIServer, pod string) time.Time {
	b.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, c := a.Condition(pod); c != nil && c.Status == corev1.ConditionTrue {
			return time.Now()
		}
	}
	b.Fatalf("pod %s not Ready within 60 s", pod)
	return time.Time{}
}
