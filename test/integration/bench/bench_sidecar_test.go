//go:build integration

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// BenchmarkPublishLatency: a marker written until its condition is visible
// through a watch of the API server, over 200 pods, at client-go's default
// rate limits (QPS 5, burst 10), one pod at a time.
func BenchmarkPublishLatency(b *testing.B) {
	const pods = 200
	a := kube.StartAPIServer(b)
	state := b.TempDir()
	kube.StartSidecar(b, a, state, kube.SidecarNode)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := a.Admin.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	visible := make(chan string, pods)
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, c := range pod.Status.Conditions {
				if c.Type == "networking.kubernetes.io/pod-network-ready" && c.Status == corev1.ConditionTrue {
					visible <- pod.Name
				}
			}
		}
	}()
	store := marker.Store{Dir: state}
	var lat []time.Duration
	for i := 0; i < pods; i++ {
		name := fmt.Sprintf("bench-%d", i)
		pod := a.NewPod(name, kube.SidecarNode)
		m := cnitest.ReadyMarker("bench", fmt.Sprintf("c%d", i), pod, "10.200.0.5/24")
		start := time.Now()
		if err := store.Write(m); err != nil {
			b.Fatal(err)
		}
		for got := ""; got != name; {
			select {
			case got = <-visible:
			case <-time.After(30 * time.Second):
				b.Fatalf("condition of %s never visible", name)
			}
		}
		lat = append(lat, time.Since(start))
	}
	fmt.Printf("\nPublish latency, marker written -> condition seen through a watch (%d pods, client-go default QPS 5 / burst 10): p50 %s, p99 %s\n",
		pods, harness.Ms(harness.Percentile(lat, .5)), harness.Ms(harness.Percentile(lat, .99)))
}

// vmRSS is a process's resident set in MB.
func vmRSS(pid int) float64 {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkSidecarFootprint: the sidecar's RSS in steady state with 110
// gated pods on its node (each with a ready marker, all published), 40 pods
// on another node, and a pool it watches; beside the same sidecar with no
// pod at all, in the same run.
func BenchmarkSidecarFootprint(b *testing.B) {
	a := kube.StartAPIServer(b)
	confDir, data := b.TempDir(), b.TempDir()
	os.WriteFile(filepath.Join(confDir, "10-pods.conflist"), []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","plugins":[
		{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/24"}]],"dataDir":%q}},
		{"type":"netready","status":{"ipam":"auto"}}]}`, data)), 0o644)
	published := func() int {
		n := 0
		pods, _ := a.Admin.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
		for i := range pods.Items {
			if c := publish.Current(&pods.Items[i], publish.DefaultConditionType); c != nil && c.Status == corev1.ConditionTrue {
				n++
			}
		}
		return n
	}
	steady := func(state, node string, want int) float64 {
		listen, _, stop := kube.StartSidecarProc(b, a.AgentKubeconfig, state, node, "--cni-conf-dir", confDir)
		defer stop()
		var pid int
		for _, p := range harness.ProcsMentioning(listen) {
			pid = p
		}
		// Every pod published (client-go's default 5 QPS makes 110
		// patches take about 22 s), then 5 s to settle.
		for start := time.Now(); published() < want; time.Sleep(time.Second) {
			if time.Since(start) > 2*time.Minute {
				b.Fatalf("%d pods published, want %d", published(), want)
			}
		}
		time.Sleep(5 * time.Second)
		worst := 0.0
		for range 10 {
			worst = max(worst, vmRSS(pid))
			time.Sleep(time.Second)
		}
		return worst
	}
	idle := steady(b.TempDir(), "node-idle", 0)

	state := b.TempDir()
	store := marker.Store{Dir: state}
	for i := range 110 {
		name := fmt.Sprintf("fp-%d", i)
		pod := a.NewPod(name, kube.SidecarNode)
		m := cnitest.ReadyMarker("pods", fmt.Sprintf("c%d", i), pod, fmt.Sprintf("10.99.0.%d/24", i+2))
		if err := store.Write(m); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 40 {
		a.NewPod(fmt.Sprintf("other-%d", i), "node-other")
	}
	busy := steady(state, kube.SidecarNode, 110)
	fmt.Printf("\nSidecar RSS, steady state (max of 10 samples over 10 s): %.1f MB with 110 gated pods published (goal <= 30 MB: %s); %.1f MB with no pod, same run\n",
		busy, metOrMissed(busy <= 30), idle)
}

// verdict is metOrMissed for a goal computed from samples: with no
// sample in any of them it says "no data", never "met" (percentile of
// nothing is 0, which meets every upper bound).
func verdict(ok bool, samples ...[]time.Duration) string {
	for _, s := range samples {
		if len(s) == 0 {
			return "no data"
		}
	}
	return metOrMissed(ok)
}

// TestBenchVerdictNeedsData: a goal whose samples are missing prints
// "no data", never "met", though the percentile of nothing (0) is under
// every bound.
func TestBenchVerdictNeedsData(t *testing.T) {
	var none []time.Duration
	some := []time.Duration{time.Millisecond}
	got := []string{
		verdict(harness.Percentile(none, .99) <= 10*time.Millisecond, none),
		verdict(harness.Percentile(some, .99) <= 10*time.Millisecond, some),
		verdict(true, some, none),
		verdict(false, some),
	}
	want := []string{"no data", "met", "no data", "MISSED"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
}

func metOrMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
