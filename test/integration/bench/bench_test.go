//go:build integration

package bench

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/nftables"

	"github.com/netready/netready/pkg/nftrule"
	"github.com/netready/netready/test/harness/cnitest"
)

// timeVersion times one exec of a CNI plugin's VERSION, its start and
// no work: the baseline of every per-call goal. A failed exec fails the
// bench, so that a missing baseline cannot pass a goal.
func timeVersion(b testing.TB, bin string) time.Duration {
	b.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	// No pipes: output copied by goroutines would be timed too.
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		b.Fatalf("%s VERSION: %v", bin, err)
	}
	return d
}

// poller is the baseline: what a fixed 200 ms polling loop (as
// ovn-kubernetes waits for its pod flows) would notice, in the same run.
type poller struct {
	mu      sync.Mutex
	pending map[string]time.Time // ip -> when first seen, zero while unseen
	seen    func(ip string) bool
}

func startPoller(ctx context.Context, seen func(string) bool) *poller {
	p := &poller{pending: map[string]time.Time{}, seen: seen}
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p.mu.Lock()
			var todo []string
			for ip, at := range p.pending {
				if at.IsZero() {
					todo = append(todo, ip)
				}
			}
			p.mu.Unlock()
			for _, ip := range todo {
				if p.seen(ip) {
					p.mu.Lock()
					p.pending[ip] = time.Now()
					p.mu.Unlock()
				}
			}
		}
	}()
	return p
}

func (p *poller) watch(ip string) {
	p.mu.Lock()
	p.pending[ip] = time.Time{}
	p.mu.Unlock()
}

func (p *poller) seenAt(ip string) time.Time {
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		p.mu.Lock()
		at := p.pending[ip]
		p.mu.Unlock()
		if !at.IsZero() {
			return at
		}
	}
	return time.Time{}
}

// listener is the floor of detection: the test process, already holding
// the source's event stream open, notes when each change arrives. It runs
// in the same run, under the same load as netready's ADDs.
type listener struct {
	mu   sync.Mutex
	seen map[string]time.Time
	// probed is when a read of the set, made on each element event,
	// first found the key (nftables only): the cost of confirming an event
	// by reading it back.
	probed map[string]time.Time
}

// startListener opens the stream for nftables (set elements) and file
// (the Calico folder), or returns nil for sources without events.
func startListener(ctx context.Context, b testing.TB, source string, a *cnitest.TestAgent) *listener {
	l := &listener{seen: map[string]time.Time{}, probed: map[string]time.Time{}}
	switch source {
	case "nftables":
		c, err := nftables.New()
		if err != nil {
			b.Fatal(err)
		}
		probe, err := nftables.New(nftables.AsLasting())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { probe.CloseLasting() })
		events := nftMonitor(ctx, b, c)
		go func() {
			for ev := range events {
				elems, ok := ev.Data.([]nftables.SetElement)
				if !ok || ev.Type != nftables.MonitorEventTypeNewSetElem {
					continue
				}
				for _, e := range elems {
					l.note(l.seen, net.IP(e.Key).String())
				}
				set, err := probe.GetSetByName(&nftables.Table{Name: a.Table, Family: nftables.TableFamilyINet}, "pods4")
				if err != nil {
					continue
				}
				held, err := probe.GetSetElements(set)
				if err != nil {
					continue
				}
				for _, e := range held {
					l.note(l.probed, net.IP(e.Key).String())
				}
			}
		}()
	case "iptables":
		// iptables-nft's rules are nftables rules: the pod's own rule, as
		// it arrives.
		listenNFTables(ctx, b, l)
	case "file":
		w, err := fsnotify.NewWatcher()
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Add(a.Calico); err != nil {
			b.Fatal(err)
		}
		go func() {
			<-ctx.Done()
			w.Close()
		}()
		go func() {
			for ev := range w.Events {
				if ev.Has(fsnotify.Create) {
					l.note(l.seen, ev.Name)
				}
			}
		}()
	default:
		return nil
	}
	return l
}

// nftMonitor streams every nftables event in the host netns until ctx
// ends. Every object: google/nftables v0.3.0 delivers events on the
// generation message, which an object filter drops.
func nftMonitor(ctx context.Context, b testing.TB, c *nftables.Conn) <-chan *nftables.MonitorEvent {
	mon := nftables.NewMonitor()
	events, err := c.AddMonitor(mon)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		<-ctx.Done()
		mon.Close()
	}()
	return events
}

// listenNFTables notes in l.seen, by IP, each set element and each rule (by
// the source address it compares) that nftables notifications announce,
// until ctx ends.
func listenNFTables(ctx context.Context, b testing.TB, l *listener) {
	c, err := nftables.New()
	if err != nil {
		b.Fatal(err)
	}
	events := nftMonitor(ctx, b, c)
	go func() {
		for ev := range events {
			switch data := ev.Data.(type) {
			case []nftables.SetElement:
				if ev.Type == nftables.MonitorEventTypeNewSetElem {
					for _, e := range data {
						l.note(l.seen, net.IP(e.Key).String())
					}
				}
			case *nftables.Rule:
				if f := strings.Fields(nftrule.Render(data)); ev.Type == nftables.MonitorEventTypeNewRule && len(f) > 2 && f[1] == "saddr" {
					l.note(l.seen, f[2])
				}
			}
		}
	}()
}

func (l *listener) note(at map[string]time.Time, key string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := at[key]; !ok {
		at[key] = now
	}
}

// seenAt is when key was first seen in m (l.seen or l.probed), waiting up to
// 2 s for it; zero if never.
func (l *listener) seenAt(m map[string]time.Time, key string) time.Time {
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		at, ok := m[key]
		l.mu.Unlock()
		if ok {
			return at
		}
	}
	return time.Time{}
}
