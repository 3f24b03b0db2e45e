//go:build integration

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// ciliumScale is the crossNode churn's Cilium side at 100 nodes. One
// stand-in agent answers every node's checks with the endpoint
// programmed (the agents are not what this measures), and, for the one
// measuring node, the meter's questions, with every IP learned at once.
// The driver plays each pod's agent towards the API server: it writes
// the pod's CiliumEndpoint right after the pending marker ADD writes,
// and deletes it with the pod.
type ciliumScale struct {
	agent  *agents.CiliumAgent
	sock   string
	checks []config.CheckConf
	driver *kubernetes.Clientset
}

// meterNode is the node whose sidecar measures the propagation, as the
// chart's crossNode.measure does on the nodes it selects.
const meterNode = 0

// startCiliumScale gives a Cilium's CRDs and deploy/'s Cilium RBAC (the
// CiliumEndpoint get of components/cilium, the meter's list and watch of
// components/cilium-propagation) and starts the stand-in agent.
func startCiliumScale(b *testing.B, a *kube.APIServer, driver *kubernetes.Clientset, dir, meterName string) *ciliumScale {
	agents.ApplyCiliumCRDs(b, a)
	a.ApplyRBAC(harness.RepoPath("deploy", "components", "cilium", "rbac.yaml"))
	a.ApplyRBAC(harness.RepoPath("deploy", "components", "cilium-propagation", "rbac.yaml"))
	sock := filepath.Join(dir, "cilium.sock")
	agent := agents.StartCiliumAgent(b, sock, time.Hour, agents.CiliumProgrammed)
	agent.AsNode(meterName, scaleNodeIP(meterNode))
	// The entry ADD would have run, parsed as ADD parses it: the
	// pending marker carries its checks with their defaults.
	conf, err := config.Parse([]byte(`{"cniVersion": "1.1.0", "name": "scale", "type": "netready", "crossNode": {},
		"checks": [{"kind": "http", "preset": "cilium", "url": "unix://` + sock + `"}]}`))
	if err != nil {
		b.Fatal(err)
	}
	return &ciliumScale{agent: agent, sock: sock, checks: conf.Checks, driver: driver}
}

// sidecarArgs are node i's sidecar's extra flags: the meter's on
// meterNode.
func (c *ciliumScale) sidecarArgs(i int) []string {
	if i != meterNode {
		return nil
	}
	return []string{"--measure-cilium-propagation=" + agents.MeasureLabel + "=true", "--cilium-socket=" + c.sock}
}

// scaleNodeIP is node i's address, as its CiliumEndpoints name it.
func scaleNodeIP(i int) string { return fmt.Sprintf("10.201.%d.%d", i/250, i%250+1) }

// scalePodIP is the i-th pod start's address, unique in a churn.
func scalePodIP(i int) string { return fmt.Sprintf("10.210.%d.%d", i/250%250, i%250+1) }

// pendingMarker is the marker a Cilium ADD with crossNode writes for pod
// once its own node holds: pending, the CiliumEndpoint left to the
// sidecar.
func (c *ciliumScale) pendingMarker(pod *corev1.Pod, ip string) *marker.Marker {
	m := cnitest.ReadyMarker("scale", pod.Name, pod, ip+"/24")
	m.State, m.ReadyAt = marker.StatePending, nil
	m.Checks = []marker.CheckResult{{Kind: config.KindHTTP, Target: c.checks[0].URL, Ready: true},
		{Kind: checks.KindCiliumPublished, Target: checks.CiliumPublishedTarget(pod.Namespace, pod.Name), Why: "left to the sidecar: ADD does not read the API server"}}
	m.Pending = &marker.Pending{Checks: c.checks, CiliumPublished: true}
	return m
}

// publish writes pod's CiliumEndpoint as node's agent does once the
// endpoint is programmed: the sandbox's attachment, the final identity,
// the pod's IP and the node's.
func (c *ciliumScale) publish(ctx context.Context, pod *corev1.Pod, node int, ip string) error {
	cep := map[string]any{"apiVersion": "cilium.io/v2", "kind": "CiliumEndpoint",
		"metadata": map[string]any{"namespace": pod.Namespace, "name": pod.Name},
		"status": map[string]any{"id": 1742, "state": "ready",
			"external-identifiers": map[string]any{"cni-attachment-id": pod.Name + ":eth0", "container-id": pod.Name, "pod-name": pod.Namespace + "/" + pod.Name},
			"identity":             map[string]any{"id": agents.CiliumFinalIdentity, "labels": []string{"k8s:app=web"}},
			"networking":           map[string]any{"addressing": []any{map[string]any{"ipv4": ip}}, "node": scaleNodeIP(node)}}}
	body, _ := json.Marshal(cep)
	return c.driver.CoreV1().RESTClient().Post().AbsPath("/apis/cilium.io/v2/namespaces", pod.Namespace, "ciliumendpoints").
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
}

// unpublish deletes pod's CiliumEndpoint, as its agent does on DEL.
func (c *ciliumScale) unpublish(ctx context.Context, namespace, name string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c.driver.CoreV1().RESTClient().Delete().AbsPath("/apis/cilium.io/v2/namespaces", namespace, "ciliumendpoints", name).Do(ctx)
}

// watchEvents is how many watch events of resource the API server has
// sent, to every watcher (apiserver_watch_events_total).
func watchEvents(b *testing.B, a *kube.APIServer, resource string) int {
	data, err := a.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("the API server's /metrics: %v", err)
	}
	return kube.SumSeries(string(data), "apiserver_watch_events_total", `resource="`+resource+`"`)
}

// cepReads counts the sidecars' CiliumEndpoint reads in window by the pod
// they are about ("<prefix>-<i>", ungated when i%5 == 4).
func cepReads(b *testing.B, auditLog, prefix string, window [2]time.Time) (gated, ungated int) {
	for _, ev := range sidecarRequests(b, auditLog, window) {
		if ev.ObjectRef.Resource != "ciliumendpoints" || ev.Verb != "get" {
			continue
		}
		i, err := strconv.Atoi(strings.TrimPrefix(ev.ObjectRef.Name, prefix+"-"))
		switch {
		case err != nil:
		case i%5 == 4:
			ungated++
		default:
			gated++
		}
	}
	return gated, ungated
}

// crossNodeRows are the figures of the churn with crossNode on (Cilium),
// beside those of the churn before it with crossNode off.
func crossNodeRows(b *testing.B, auditLog, meterListen string, nodes int, off, on scaleRun) []string {
	reqs, byPod := auditCounts(b, auditLog, on.window)
	others := otherWrites(reqs)
	per10s := float64(others) / float64(nodes) / (on.window[1].Sub(on.window[0]).Seconds() / 10)
	gatedWrites, ungatedWrites := podWrites(byPod, "c")
	gatedReads, ungatedReads := cepReads(b, auditLog, "c", on.window)
	starts := func(r scaleRun) float64 { return float64(r.gated + r.ungated) }
	h := kube.ScrapeHistogram(b, meterListen, "netready_cilium_propagation_seconds")
	return []string{
		fmt.Sprintf("| crossNode on (Cilium; 1 measuring node): API writes per gated pod start | %.3f (%d for %d) | exactly 1 | %s |", float64(gatedWrites)/float64(on.gated), gatedWrites, on.gated, metOrMissed(gatedWrites == on.gated)),
		fmt.Sprintf("| crossNode on: writes about ungated pods | %d for %d | 0 | %s |", ungatedWrites, on.ungated, metOrMissed(ungatedWrites == 0)),
		fmt.Sprintf("| crossNode on: CiliumEndpoint reads per pod start, gated / ungated | %.3f (%d for %d) / %.3f (%d for %d) | | |",
			float64(gatedReads)/float64(on.gated), gatedReads, on.gated, float64(ungatedReads)/float64(on.ungated), ungatedReads, on.ungated),
		fmt.Sprintf("| crossNode on: every sidecar request during the churn | %s | | |", formatCounts(reqs)),
		fmt.Sprintf("| crossNode on: writes per node per 10 s besides the pods' conditions and Events | %.3f (%d) | at most 1 | %s |", per10s, others, metOrMissed(per10s <= 1)),
		fmt.Sprintf("| crossNode on: marker -> condition, p50 / p99 | %s / %s (%d pods) | | |", harness.Ms(harness.Percentile(on.latency, .5)), harness.Ms(harness.Percentile(on.latency, .99)), len(on.latency)),
		fmt.Sprintf("| pod watch events sent per pod start (every watcher: the sidecars and the benchmark's one), crossNode off / on | %.2f / %.2f | | |",
			float64(off.podEvents)/starts(off), float64(on.podEvents)/starts(on)),
		fmt.Sprintf("| CiliumEndpoint watch events sent per pod start, crossNode on (the one measuring sidecar: no other watches them) | %.2f (%d) | | |",
			float64(on.cepEvents)/starts(on), on.cepEvents),
		fmt.Sprintf("| the meter: pods of other nodes measured; its agent's /v1/ip answers per pod start | %d of %d; %.2f | | |",
			h.Count, on.gated+on.ungated, float64(on.ipQueries)/starts(on)),
		fmt.Sprintf("| kube-apiserver CPU during the churn, crossNode off / on | %.1f s / %.1f s (%.2fx) | | |", off.apiCPU, on.apiCPU, on.apiCPU/off.apiCPU),
		fmt.Sprintf("| etcd CPU during the churn, crossNode off / on (on also writes a CiliumEndpoint per pod) | %.1f s / %.1f s (%.2fx) | | |", off.etcdCPU, on.etcdCPU, on.etcdCPU/off.etcdCPU),
	}
}

// otherWrites counts the writes among reqs (auditCounts' keys) that are
// neither a pod's condition nor an Event: what crossNode may add per node.
// The scope check's dry-run probes persist nothing and are left out.
func otherWrites(reqs map[string]int) int {
	n := 0
	for key, c := range reqs {
		verb, what, _ := strings.Cut(key, " ")
		switch {
		case verb == "dry-run" || strings.HasPrefix(what, "pods/status") || strings.HasPrefix(what, "events"):
		case verb == "create" || verb == "update" || verb == "patch" || verb == "delete" || verb == "deletecollection":
			n += c
		}
	}
	return n
}

// podWrites splits byPod's writes about the churn's pods ("<prefix>-<i>")
// into gated and ungated (i%5 == 4).
func podWrites(byPod map[string]int, prefix string) (gated, ungated int) {
	for pod, n := range byPod {
		i, err := strconv.Atoi(strings.TrimPrefix(pod, prefix+"-"))
		switch {
		case err != nil:
		case i%5 == 4:
			ungated += n
		default:
			gated += n
		}
	}
	return gated, ungated
}
