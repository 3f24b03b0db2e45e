package scopecheck

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
)

// ParamsSelector picks the policies' params out of the sidecar's
// namespace, as each binding's paramRef does (deploy/admission.yaml).
const ParamsSelector = "netready.io/params=settings"

// followUps are the re-checks after the params changed, besides the one
// at once: the API server's policies see the change through an informer
// of their own, so a check right after it can still find the old params
// in force.
var followUps = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// Keep goes on proving the scope after Wait returned: every period (with
// up to a tenth more, so that a fleet of sidecars does not probe in
// step), and at once and a few times more whenever changed fires. Each
// check's Verdict goes to Report; while one holds the writes, the checks
// back off from 1 s to MaxGap (waking when a hold on an unknown scope
// ends). The caller holds every write while the last Verdict says so.
// Keep returns when ctx ends.
func (p *Prover) Keep(ctx context.Context, self Self, period time.Duration, changed <-chan struct{}) {
	var pending []time.Duration
	gap := time.Second
	writing, proved := true, !p.acting
	next := period + rand.N(period/10+1)
	timer := time.NewTimer(next)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			pending = followUps
		case <-timer.C:
			if len(pending) > 0 {
				pending = pending[1:]
			}
		}
		err := Check(ctx, p.Writer, self, p.Timeout)
		if ctx.Err() != nil {
			return
		}
		v, until := p.judge(err)
		p.Report(v)
		switch {
		case !v.Write:
			if writing {
				p.Log.Warn("the sidecar's scope is no longer proved: holding every write until it is", "err", v.Err)
			}
			writing = false
			next, gap = gap, min(2*gap, p.MaxGap)
			if !until.IsZero() {
				next = min(next, max(until.Sub(p.now()), 0))
			}
		case v.Err != nil:
			if v.Warn {
				p.Log.Warn("writing although the sidecar's scope cannot be told, after holding every write", "held", p.UnknownHold, "err", v.Err)
			}
			writing, proved, gap = true, false, time.Second
			next = period + rand.N(period/10+1)
		default:
			if !proved || !writing {
				p.Log.Info("the admission policies that scope this sidecar are in force again", "pod", self.PodNamespace+"/"+self.PodName)
			}
			writing, proved, gap = true, true, time.Second
			next = period + rand.N(period/10+1)
		}
		if len(pending) > 0 {
			next = min(next, pending[0])
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// WatchParams sends on changed (without blocking: one pending signal is
// enough) whenever a ConfigMap labelled ParamsSelector in namespace is
// added, changed, relabelled or deleted, and after any gap in its watch,
// when a change may have gone unseen. A watch it may not make (RBAC from
// an older deploy/) is logged: Keep's periodic checks still run. It
// returns when ctx ends.
func WatchParams(ctx context.Context, c metadata.Interface, namespace string, timeout time.Duration, changed chan<- struct{}, log *slog.Logger) {
	res := c.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(namespace)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	gap, rv := time.Second, ""
	for first := true; ; first = false {
		err := func() error {
			if rv == "" {
				lctx, cancel := context.WithTimeout(ctx, timeout)
				list, err := res.List(lctx, metav1.ListOptions{LabelSelector: ParamsSelector})
				cancel()
				if err != nil {
					return err
				}
				rv = list.ResourceVersion
				if !first {
					notify()
				}
			}
			secs := int64(300 + rand.N(300))
			wi, err := res.Watch(ctx, metav1.ListOptions{LabelSelector: ParamsSelector, ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &secs})
			if err != nil {
				return err
			}
			defer wi.Stop()
			gap = time.Second
			for ev := range wi.ResultChan() {
				switch ev.Type {
				case watch.Error:
					return apierrors.FromObject(ev.Object)
				case watch.Bookmark:
				default:
					notify()
				}
				if m, ok := ev.Object.(metav1.Object); ok && m.GetResourceVersion() != "" {
					rv = m.GetResourceVersion()
				}
			}
			return nil // the server ended the watch: resume from rv
		}()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// A gap: list again and check, whatever happened meanwhile.
			rv = ""
			wait := gap
			if apierrors.IsForbidden(err) {
				wait = 5 * time.Minute
				log.Warn("cannot watch the admission policies' params (apply deploy/rbac.yaml whole); their changes are seen only at the periodic scope check", "namespace", namespace, "err", err, "retryIn", wait)
			} else {
				log.Warn("watching the admission policies' params", "namespace", namespace, "err", err, "retryIn", wait)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			gap = min(2*gap, time.Minute)
		}
	}
}
