package propagation

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/metrics"
)

// maxFresh bounds how many endpoints that were added without a final
// identity or an IP are remembered until they get one.
const maxFresh = 4096

// loop turns CiliumEndpoint events into measurements. Its state has one
// owner, the goroutine in run; each measurement runs in a goroutine of
// its own and reports back on done. Measurements outlive a watch: one
// that ends (410) and starts again loses none that are under way, so
// that slow ones are not the ones left out.
type loop struct {
	cfg   Config
	agent Agent
	m     *metrics.Metrics
	// self are this node's addresses: an endpoint on it is not measured.
	self map[netip.Addr]bool
	// inflight are the measurements under way, by namespace/name.
	inflight map[string]*job
	// fresh are endpoints added without a final identity or an IP yet:
	// the event that gives them one is their news, even if the agent
	// learned it first.
	fresh    map[string]bool
	done     chan *job
	wg       sync.WaitGroup
	sessions int
}

// job is one measurement: the agent's ipcache must map every IP to
// identity.
type job struct {
	key      string
	identity int64
	ips      []netip.Addr
	// t0 is when the event arrived.
	t0 time.Time
	// added: observe it even when the agent holds it at the first look
	// (it learned it no later than the sidecar did); else that first
	// look means nothing changed for the agent.
	added  bool
	cancel context.CancelFunc
}

func newLoop(cfg Config, agent Agent, m *metrics.Metrics) *loop {
	return &loop{cfg: cfg, agent: agent, m: m, self: map[netip.Addr]bool{}, inflight: map[string]*job{}, fresh: map[string]bool{},
		done: make(chan *job, cfg.InFlight)}
}

// run takes events until the channel closes or ctx ends, and returns the
// watch's last error, if any. Measurements under way go on.
func (l *loop) run(ctx context.Context, events <-chan watch.Event) error {
	var last error
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case j := <-l.done:
			if l.inflight[j.key] == j {
				delete(l.inflight, j.key)
			}
		case ev, ok := <-events:
			if !ok {
				if last == nil {
					last = ctx.Err()
				}
				return last
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if c, ok := ev.Object.(*kubeapi.CiliumEndpoint); ok {
					l.endpoint(ctx, c, ev.Type == watch.Added, time.Now())
				}
			case watch.Deleted:
				if c, ok := ev.Object.(*kubeapi.CiliumEndpoint); ok {
					l.forget(c.Metadata.Namespace + "/" + c.Metadata.Name)
				}
			case watch.Error:
				last = watchError(ev)
			}
		}
	}
}

// watchError is the error an ERROR event carries; 410 is errExpired.
func watchError(ev watch.Event) error {
	err := apierrors.FromObject(ev.Object)
	if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
		return errExpired
	}
	return err
}

// endpoint starts measuring c when it is a pod's on another node with a
// final identity and an IP, and not measured already.
func (l *loop) endpoint(ctx context.Context, c *kubeapi.CiliumEndpoint, added bool, t0 time.Time) {
	key := c.Metadata.Namespace + "/" + c.Metadata.Name
	node, err := netip.ParseAddr(c.NodeIP())
	if err == nil && l.self[node.Unmap()] {
		return
	}
	id := c.Identity()
	var ips []netip.Addr
	for _, s := range c.IPs() {
		if ip, err := netip.ParseAddr(s); err == nil {
			ips = append(ips, ip.Unmap())
		}
	}
	if err != nil || id <= 0 || id == checks.CiliumInitIdentity || len(ips) == 0 {
		if added && len(l.fresh) < maxFresh {
			l.fresh[key] = true
		}
		return
	}
	added = added || l.fresh[key]
	delete(l.fresh, key)
	if j := l.inflight[key]; j != nil {
		if j.identity == id && slices.Equal(j.ips, ips) {
			return // measured already, from the first event
		}
		// A new identity or IP: measure that, from now.
		added = added || j.added
		j.cancel()
		delete(l.inflight, key)
	}
	if len(l.inflight) >= l.cfg.InFlight {
		l.m.CiliumPropagationUnmeasured.WithLabelValues(metrics.UnmeasuredBusy).Inc()
		return
	}
	jctx, cancel := context.WithCancel(ctx)
	j := &job{key: key, identity: id, ips: ips, t0: t0, added: added, cancel: cancel}
	l.inflight[key] = j
	l.wg.Add(1)
	go l.measure(jctx, j)
}

// forget drops what is known of a deleted endpoint; its measurement, if
// any, is not counted.
func (l *loop) forget(key string) {
	delete(l.fresh, key)
	if j := l.inflight[key]; j != nil {
		j.cancel()
		delete(l.inflight, key)
	}
}

// wait returns once every measurement has ended.
func (l *loop) wait() { l.wg.Wait() }

// measure asks the agent until its ipcache holds j, or GiveUp has passed
// since the event; a cancelled j counts nothing.
func (l *loop) measure(ctx context.Context, j *job) {
	defer l.wg.Done()
	defer j.cancel()
	deadline := j.t0.Add(l.cfg.GiveUp)
	pending := slices.Clone(j.ips)
	looked := false // an answer came
	// failed: the last answer was a failure. An agent that answers late
	// (frozen, overloaded) is slow to learn, not broken, so a question
	// cut short by its deadline changes nothing.
	failed := false
	gap := l.cfg.PollMin
	for {
		var err error
		pending, err = l.holds(ctx, deadline, j.identity, pending)
		if ctx.Err() != nil {
			return
		}
		if err == nil && len(pending) == 0 {
			if looked || j.added {
				l.m.CiliumPropagation.Observe(time.Since(j.t0).Seconds())
			}
			break
		}
		looked = looked || err == nil
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			failed = err != nil
		}
		if !time.Now().Before(deadline) {
			reason := metrics.UnmeasuredTimeout
			if failed {
				reason = metrics.UnmeasuredAgent
			}
			l.m.CiliumPropagationUnmeasured.WithLabelValues(reason).Inc()
			break
		}
		if err != nil {
			gap = l.cfg.PollMax // not answering: no need to ask often
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(gap, time.Until(deadline))):
		}
		gap = min(2*gap, l.cfg.PollMax)
	}
	select {
	case l.done <- j:
	case <-ctx.Done():
	}
}

// holds asks for each IP of pending and returns those the agent does not
// map to identity yet, by deadline.
func (l *loop) holds(ctx context.Context, deadline time.Time, identity int64, pending []netip.Addr) ([]netip.Addr, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var still []netip.Addr
	for i, ip := range pending {
		got, err := l.agent.Identity(ctx, ip)
		if err != nil {
			return append(still, pending[i:]...), err
		}
		if got != identity {
			still = append(still, ip)
		}
	}
	return still, nil
}
