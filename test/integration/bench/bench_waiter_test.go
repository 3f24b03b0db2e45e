//go:build integration

package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/netready/netready/test/harness/cnitest"
)

// BenchmarkWaiterCost: what one waiting ADD costs in CPU, for each storm
// kind, with nothing else running: its start and first probes, each second
// of waiting, and each other pod's programming it hears while it waits.
// It says where the storm's CPU goes: 110 waiters each hearing 110 pods.
func BenchmarkWaiterCost(b *testing.B) {
	const reps, foreign = 5, 110
	wait := 3 * time.Second
	type row struct {
		name              string
		short, long, busy float64
	}
	var rows []row
	tuning := waiterCPU(b, nil, reps, 0, 0)
	for _, kind := range stormKinds(b) {
		if only := os.Getenv("NETREADY_STORM_KINDS"); only != "" && !strings.Contains(only, strings.Fields(kind.name)[0]) {
			continue
		}
		rows = append(rows, row{name: kind.name,
			short: waiterCPU(b, kind, reps, 200*time.Millisecond, 0),
			long:  waiterCPU(b, kind, reps, wait, 0),
			busy:  waiterCPU(b, kind, reps, wait, foreign)})
	}
	fmt.Printf("\nOne waiting ADD's CPU (bridge + host-local + netready; tuning in netready's place: %.1f ms), mean of %d\n", tuning*1000, reps)
	for _, r := range rows {
		fmt.Printf("  %-40s programmed after 0.2 s: %5.1f ms | after %s: %5.1f ms (%.2f ms per second waited) | after %s with %d other pods programmed meanwhile: %5.1f ms (%.3f ms per other pod)\n",
			r.name, r.short*1000, wait, r.long*1000, (r.long-r.short)*1000/(wait-200*time.Millisecond).Seconds(), wait, foreign, r.busy*1000, (r.busy-r.long)*1000/foreign)
	}
}

// waiterCPU runs reps ADDs in turn, each programmed wait after host-local
// allocated its IP, with foreign other IPs programmed meanwhile, and gives
// the mean CPU seconds of each ADD's chain.
func waiterCPU(b *testing.B, kind *stormKind, reps int, wait time.Duration, foreign int) float64 {
	n := stormNet(b, kind)
	if err := os.MkdirAll(n.IPAMDir, 0o755); err != nil {
		b.Fatal(err)
	}
	round := 0
	if kind != nil {
		stop := programOnAllocation(b, n.IPAMDir, wait, func(ip string) {
			if _, err := kind.program(ip); err != nil {
				b.Errorf("program %s: %v", ip, err)
			}
		})
		defer stop()
	}
	cni, list := n.Libcni()
	var total float64
	for i := range reps {
		netns := cnitest.NewNS(b)
		rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("waiter-%s-%d", n.ID, i), NetNS: netns.Path(), IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", fmt.Sprintf("waiter-%d", i)}, {"K8S_POD_UID", fmt.Sprintf("u-%d", i)}}}
		done := make(chan struct{})
		if kind != nil && foreign > 0 {
			round++
			r := round
			go func() {
				defer close(done)
				time.Sleep(100 * time.Millisecond)
				step := (wait - 300*time.Millisecond) / time.Duration(foreign)
				for j := range foreign {
					if _, err := kind.program(fmt.Sprintf("10.254.%d.%d", r%250, j+1)); err != nil {
						b.Errorf("program a foreign IP: %v", err)
					}
					time.Sleep(step)
				}
			}()
		} else {
			close(done)
		}
		cpu0 := childrenCPU()
		if _, err := cni.AddNetworkList(context.Background(), list, rt); err != nil {
			b.Fatalf("ADD: %v", err)
		}
		total += childrenCPU() - cpu0
		<-done
		if err := cni.DelNetworkList(context.Background(), list, rt); err != nil {
			b.Errorf("DEL: %v", err)
		}
	}
	return total / float64(reps)
}
