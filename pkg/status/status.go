// Package status owns the answer to CNI STATUS: whether this host can take
// ADDs now. It verifies netready's own state folder, the IP pool of a
// network (host-local's folder, or the Cilium agent's or ipamd's count)
// when poolAction is "notready", and the health of the agents the
// operator names. A pool it cannot count is netready's own problem: it is
// noted for the sidecar (entry.go), never a failure.
// Every probe is bounded by the caller's context, which STATUS keeps under
// one second.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/pool"
)

// probeMargin is how much earlier than STATUS's own deadline agent probes
// give up.
const probeMargin = 50 * time.Millisecond

// Check returns nil when the host can take ADDs, or an error that says why;
// every problem found, joined with "; ".
func Check(ctx context.Context, conf *config.NetConf) error {
	if err := stateDirUsable(conf.StateDir); err != nil {
		return err
	}
	// netready's own entry never fails STATUS: a pool it cannot count is
	// noted for the sidecar, as an entry that ADD refuses is. A note that
	// cannot be written costs the operator the note, never the node.
	ipam, uncountable := countedPool(conf)
	_ = keepNote(conf, uncountable)
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
	// Probes end a little before STATUS does, so that a hanging agent is
	// reported by name.
	probeCtx := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		probeCtx, cancel = context.WithDeadline(ctx, d.Add(-probeMargin))
		defer cancel()
	}
	// With poolAction "taint" the pool is the sidecar's (countedPool is
	// nil): a short pool taints the node instead of turning it NotReady.
	if ipam != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := checkPool(probeCtx, conf.Name, conf.StateDir, ipam, *conf.Status.MinFree); err != nil {
				fail(err)
			}
		}()
	}
	agentErrs := map[string]error{}
	answered := make([]bool, len(conf.Status.Agents))
	for i := range conf.Status.Agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := checkAgent(probeCtx, &conf.Status.Agents[i], time.Now())
			mu.Lock()
			defer mu.Unlock()
			answered[i] = true
			if err != nil {
				agentErrs[agentKey(&conf.Status.Agents[i])] = err
			}
		}()
	}
	// Wait for the probes, but never past the deadline: a probe that
	// hangs counts as a failure of its agent.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range conf.Status.Agents {
		a := &conf.Status.Agents[i]
		if !answered[i] {
			agentErrs[agentKey(a)] = fmt.Errorf("agent %s%s did not answer within the STATUS budget", a.URL, a.Path)
		}
	}
	// A record that cannot be written (a full /run) costs failAfter once
	// more, never a NotReady node: failures that lasted by the record read
	// stand, and a new one counts as just begun.
	lasting, _ := judgeAgents(conf.StateDir, conf.Name, conf.Status.Agents, agentErrs, conf.Status.FailAfterDuration, time.Now())
	for _, e := range lasting {
		errs = append(errs, e.Error())
	}
	if len(errs) > 0 {
		slices.Sort(errs)
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

// checkPool fails when the pool is exhausted: a range set (a pod needs
// one address from each) has fewer than minFree addresses left and the
// source cannot grow it. A source that cannot tell (an agent that does
// not answer within ctx) never fails it. host-local's count is kept in
// stateDir while the folder does not change, an agent's answer for a few
// seconds (pool.ReadForStatus). ipam is countedPool's.
func checkPool(ctx context.Context, network, stateDir string, ipam json.RawMessage, minFree int) error {
	cnt, err := pool.ReadForStatus(ctx, network, stateDir, ipam)
	if err != nil {
		return err
	}
	return cnt.Exhausted(minFree)
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
