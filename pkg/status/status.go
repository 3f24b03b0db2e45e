// Package status owns the answer to CNI STATUS: whether this host can take
// ADDs now. It verifies netready's own state folder, the IP pool of a
// host-local network, and the health of the agents the operator names.
// Every probe is bounded by the caller's context, which STATUS keeps under
// one second.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/conflist"
)

// probeMargin is how much earlier than STATUS's own deadline agent probes
// give up.
const probeMargin = 50 * time.Millisecond

// DefaultHostLocalDataDir is host-local's default dataDir.
const DefaultHostLocalDataDir = "/var/lib/cni/networks"

// Check returns nil when the host can take ADDs, or an error that says why;
// every problem found, joined with "; ".
func Check(ctx context.Context, conf *config.NetConf) error {
	if err := stateDirUsable(conf.StateDir); err != nil {
		return err
	}
	if conf.Status == nil {
		return nil
	}
	var (
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err.Error())
		mu.Unlock()
	}
	if len(conf.Status.IPAM) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := checkPool(conf.Name, conf.Status); err != nil {
				fail(err)
			}
		}()
	}
	// Probes end a little before STATUS does, so that a hanging agent is
	// reported by name.
	probeCtx := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		probeCtx, cancel = context.WithDeadline(ctx, d.Add(-probeMargin))
		defer cancel()
	}
	for i := range conf.Status.Agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := checkAgent(probeCtx, &conf.Status.Agents[i], time.Now()); err != nil {
				fail(err)
			}
		}()
	}
	// Wait for the probes, but never past the deadline: a probe that
	// hangs is reported as not answering.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		fail(errors.New("agents did not all answer within the STATUS budget"))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// stateDirUsable: ADD must be able to write markers there.
func stateDirUsable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("state directory %s is not usable: %w", dir, err)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("state directory %s is not writable: %w", dir, err)
	}
	return nil
}

// Pool is one range set of a host-local pool and how much of it is used.
type Pool struct {
	RangeSet string
	Usable   *big.Int
	Used     int64
}

// Free is what is left.
func (p Pool) Free() *big.Int {
	return new(big.Int).Sub(p.Usable, big.NewInt(p.Used))
}

// checkPool fails when any range set (a pod needs one IP from each) has
// fewer than minFree addresses left.
func checkPool(network string, sc *config.StatusConf) error {
	ipam := sc.IPAM
	if sc.IPAMAuto() {
		f, err := conflist.Find(sc.ConfDir, network)
		if err != nil {
			return fmt.Errorf(`ipam "auto": %w`, err)
		}
		if ipam = f.PrimaryIPAM(); ipam == nil {
			return fmt.Errorf(`ipam "auto": the first plugin of %s has no host-local ipam to count`, f.Path)
		}
	}
	pools, err := CountPool(network, ipam)
	if err != nil {
		return err
	}
	minFree := big.NewInt(int64(*sc.MinFree))
	for _, p := range pools {
		free := p.Free()
		if free.Cmp(minFree) >= 0 {
			continue
		}
		what := "IP pool exhausted"
		if free.Sign() > 0 {
			what = fmt.Sprintf("IP pool below minFree %d", *sc.MinFree)
		}
		where := ""
		if len(pools) > 1 {
			where = " in " + p.RangeSet
		}
		return fmt.Errorf("%s (%d of %s addresses in use%s)", what, p.Used, p.Usable, where)
	}
	return nil
}

// CountPool reads a host-local ipam object and its allocation files.
func CountPool(network string, ipam json.RawMessage) ([]Pool, error) {
	netConf, _ := json.Marshal(map[string]any{"name": network, "ipam": ipam})
	cfg, _, err := allocator.LoadIPAMConfig(netConf, "")
	if err != nil {
		return nil, fmt.Errorf("status ipam: %w", err)
	}
	dataDir := cfg.DataDir
	if dataDir == "" {
		dataDir = DefaultHostLocalDataDir
	}
	names, err := allocationNames(filepath.Join(dataDir, network))
	if err != nil {
		return nil, err
	}
	pools := make([]Pool, len(cfg.Ranges))
	var bounds []bound
	for i := range cfg.Ranges {
		pools[i] = Pool{RangeSet: cfg.Ranges[i].String(), Usable: usable(cfg.Ranges[i])}
		for _, r := range cfg.Ranges[i] {
			bounds = append(bounds, newBound(i, r))
		}
	}
	for _, name := range names {
		ip, err := netip.ParseAddr(name)
		if err != nil {
			continue // last_reserved_ip.N, lock
		}
		for _, b := range bounds {
			if b.holds(ip) {
				pools[b.set].Used++
				break
			}
		}
	}
	return pools, nil
}

// bound is one range as netip values, so that counting tens of thousands
// of names allocates nothing per name.
type bound struct {
	set                 int
	start, end, gateway netip.Addr
}

func newBound(set int, r allocator.Range) bound {
	addr := func(ip net.IP) netip.Addr {
		a, _ := netip.AddrFromSlice(ip)
		return a.Unmap()
	}
	return bound{set: set, start: addr(r.RangeStart), end: addr(r.RangeEnd), gateway: addr(r.Gateway)}
}

func (b bound) holds(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.BitLen() == b.start.BitLen() && ip.Compare(b.start) >= 0 && ip.Compare(b.end) <= 0 && ip != b.gateway
}

// allocationNames lists host-local's files without a stat each: a pool of
// 65,000 addresses is counted every few seconds.
func allocationNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // nothing allocated yet
	}
	if err != nil {
		return nil, fmt.Errorf("status ipam: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("status ipam: %w", err)
	}
	return names, nil
}

// usable counts what host-local can hand out: rangeStart to rangeEnd of
// each range, less the gateway.
func usable(rs allocator.RangeSet) *big.Int {
	total := new(big.Int)
	for _, r := range rs {
		n := new(big.Int).Sub(ipInt(r.RangeEnd), ipInt(r.RangeStart))
		n.Add(n, big.NewInt(1))
		if r.Gateway != nil && r.Contains(r.Gateway) {
			n.Sub(n, big.NewInt(1))
		}
		total.Add(total, n)
	}
	return total
}

func ipInt(ip net.IP) *big.Int {
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return new(big.Int).SetBytes(ip)
}

// checkAgent: an http agent answers 2xx; a file agent's file exists and,
// with maxAge, was written recently.
func checkAgent(ctx context.Context, a *config.AgentConf, now time.Time) error {
	switch a.Kind {
	case config.AgentHTTP:
		c, err := checks.NewHTTPCheck(a.URL, a.Path, checks.ExpectJudge(a.Expect))
		if err != nil {
			return fmt.Errorf("agent %s: %w", a.URL, err)
		}
		ready, why, err := c.Probe(ctx)
		if err != nil {
			return fmt.Errorf("agent %s: %w", c.Target(), err)
		}
		if !ready {
			return fmt.Errorf("agent %s is not healthy: %s", c.Target(), why)
		}
	case config.AgentFile:
		info, err := os.Stat(a.Path)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("agent file %s does not exist: is the agent running?", a.Path)
		}
		if err != nil {
			return fmt.Errorf("agent file %s: %w", a.Path, err)
		}
		if age := now.Sub(info.ModTime()); a.MaxAgeDuration > 0 && age > a.MaxAgeDuration {
			return fmt.Errorf("agent file %s is stale: last written %s ago (maxAge %s)", a.Path, age.Round(time.Second), a.MaxAge)
		}
	}
	return nil
}
