//go:build integration

package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// The client node: a real node whose pods run the client image, each one's
// first action a TCP connection, and what each pod's first connection did.

// writeFirstPacketConflist points the node's runtime at bridge + host-local
// in fpSubnet, with netready's entry last when entry is not "".
func writeFirstPacketConflist(n *kube.K8sNode, entry string) {
	plugins := fmt.Sprintf(`{"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}}`, kube.NodeBridge, fpSubnet, n.Path("ipam"))
	if entry != "" {
		plugins += ",\n    " + entry
	}
	conf := fmt.Sprintf("{\n  \"cniVersion\": \"1.1.0\",\n  \"name\": \"nr-fp\",\n  \"plugins\": [\n    %s\n  ]\n}\n", plugins)
	tmp := filepath.Join(n.ConfDir, ".10-nr-node.tmp")
	os.WriteFile(tmp, []byte(conf), 0o644)
	if err := os.Rename(tmp, filepath.Join(n.ConfDir, "10-nr-node.conflist")); err != nil {
		n.T.Fatal(err)
	}
	n.WaitFor("containerd loading the pod network", time.Minute, func() bool {
		out, err := n.CRI.Crictl("info", "-o", "json")
		return err == nil && strings.Contains(out, "nr-fp") && strings.Contains(out, "netready") == (entry != "")
	})
}

// startClientNode starts a real node with the client image imported,
// forwarding guarded on the first-packet subnet, and the netready plugin
// this test run built in the runtime's bin dir.
func startClientNode(t *testing.T) *kube.K8sNode {
	t.Helper()
	image := os.Getenv("NETREADY_CLIENT_IMAGE")
	if _, err := os.Stat(image); err != nil {
		t.Fatalf("NETREADY_CLIENT_IMAGE: %v; run `make test` (it builds the client image)", err)
	}
	n := kube.StartNode(t)
	n.ImportImage(image)
	cnitest.GuardForwarding(t, fpSubnet)
	data, err := os.ReadFile(filepath.Join(harness.BinDir, "netready"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.BinDir, "netready"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

// clientPod runs the client image once (or, with stay, keeps it running).
func clientPod(name string, port int, gated, stay bool) *corev1.Pod {
	env := []corev1.EnvVar{{Name: "TARGET", Value: net.JoinHostPort(fpGateway, strconv.Itoa(port))}, {Name: "TIMEOUT", Value: fpClientTimeout.String()}}
	if stay {
		env = append(env, corev1.EnvVar{Name: "STAY", Value: "1"})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{NodeName: kube.NodeName, TerminationGracePeriodSeconds: new(int64), RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "client", Image: "netready.test/client:1", ImagePullPolicy: corev1.PullNever, Env: env}}},
	}
	if gated {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: kube.NodeConditionType}}
	}
	return p
}

// clientResult is one client pod's first connection.
type clientResult struct {
	name, ip, msg string
	connected     bool
	// sinceAlloc: from host-local's allocation of its IP to the client's
	// start; allowed: whether the agent allowed the IP by then.
	sinceAlloc time.Duration
	allowed    bool
	// returned: from the agent allowing the IP to ADD's readyAt, when
	// netready ran.
	returned time.Duration
}

// runClients starts count client pods at once and returns each one's
// first connection, once all have finished.
func runClients(n *kube.K8sNode, agent *strictAgent, prefix string, count, port int) []clientResult {
	n.T.Helper()
	for i := range count {
		n.CreatePod(clientPod(fmt.Sprintf("%s-%d", prefix, i), port, false, false))
	}
	var results []clientResult
	for i := range count {
		name := fmt.Sprintf("%s-%d", prefix, i)
		p := n.WaitPod(name, "finished", 5*time.Minute, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		})
		r := clientResult{name: name, ip: p.Status.PodIP}
		if cs := p.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Terminated != nil {
			r.msg = cs[0].State.Terminated.Message
		}
		r.connected = p.Status.Phase == corev1.PodSucceeded && strings.HasPrefix(r.msg, "connected")
		if i := strings.LastIndex(r.msg, "started "); i >= 0 {
			if ms, err := strconv.ParseInt(r.msg[i+len("started "):], 10, 64); err == nil {
				started := time.UnixMilli(ms)
				if l, ok := agent.leaseAt(p.Status.PodIP, started); ok {
					r.sinceAlloc = started.Sub(l.allocated)
					r.allowed = !l.added.IsZero() && !l.added.After(started)
					if !l.ready.IsZero() && !l.added.IsZero() {
						r.returned = l.ready.Sub(l.added)
					}
				}
			}
		}
		results = append(results, r)
	}
	clearPods(n, context.Background())
	agent.reportFailures(n.T)
	return results
}

// summarize counts the connected clients and describes when they started.
func summarize(results []clientResult) (connected int, text string) {
	var since []time.Duration
	var failed []string
	for _, r := range results {
		if r.connected {
			connected++
		} else if len(failed) < 2 {
			failed = append(failed, r.name+": "+r.msg)
		}
		since = append(since, r.sinceAlloc)
	}
	slices.Sort(since)
	text = fmt.Sprintf("%d of %d connected on the first try; clients started %.1f s (median; min %.1f, max %.1f) after host-local allocated their IP, the agent allowing it after %s",
		connected, len(results), harness.Percentile(since, .5).Seconds(), since[0].Seconds(), since[len(since)-1].Seconds(), fpDelay)
	var returned []time.Duration
	for _, r := range results {
		if r.returned != 0 {
			returned = append(returned, r.returned)
		}
	}
	if len(returned) > 0 {
		slices.Sort(returned)
		text += fmt.Sprintf("; ADD's readyAt came p50 %s, p99 %s after the agent's nft call began (%d markers)",
			harness.Ms(harness.Percentile(returned, .5)), harness.Ms(harness.Percentile(returned, .99)), len(returned))
	}
	if len(failed) > 0 {
		text += "; e.g. " + strings.Join(failed, "; ")
	}
	return connected, text
}

// clearPods deletes every pod of default and waits until their addresses
// are released.
func clearPods(n *kube.K8sNode, ctx context.Context) {
	n.T.Helper()
	n.Admin.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
	n.WaitFor("every pod gone and its address released", 3*time.Minute, func() bool {
		pods, err := n.Admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		entries, _ := os.ReadDir(n.Path("ipam/nr-fp"))
		ips := 0
		for _, e := range entries {
			if net.ParseIP(e.Name()) != nil {
				ips++
			}
		}
		return err == nil && len(pods.Items) == 0 && ips == 0
	})
}
