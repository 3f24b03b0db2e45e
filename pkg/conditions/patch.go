package conditions

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/publish"
)

// process publishes one pod's condition if the pod does not show it yet.
// An error means: try again later.
func (c *Controller) process(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.pods.Pods(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	c.noteRecreated(pod)
	if !publish.Gated(pod, c.opts.ConditionType) {
		// Out of scope: its markers stay on disk for CHECK, untouched.
		c.state.podOutOfScope(pod.UID)
		return nil
	}
	j, a, basis := c.desired(pod, false)
	c.do(a)
	// The memory is kept first: a later round must never find less than
	// what was published. A memory that cannot be kept still lets a not
	// ready condition out, so that no True outlives its sandbox.
	var kept error
	if j.Remember != nil {
		kept = c.keep(c.opts.StateDir, pod.UID, *j.Remember)
		if kept != nil && j.EndWait {
			// Its start is lost with the write: judged without it.
			j, _, basis = c.desired(pod, true)
		}
		if kept != nil && (!j.Publish || j.Cond.Status == corev1.ConditionTrue) {
			return kept
		}
	}
	if !j.Publish {
		return nil
	}
	if err := c.publish(ctx, key, pod, j, basis); err != nil {
		return err
	}
	return kept
}

// publish sends the judgement j of a gated pod if the pod does not show it
// yet. An error means: try again later.
func (c *Controller) publish(ctx context.Context, key string, pod *corev1.Pod, j judgement, basis string) error {
	want := j.Cond
	cur := publish.Current(pod, c.opts.ConditionType)
	if publish.Shows(cur, want) || c.alreadySent(pod, want) {
		return nil
	}
	if wait, ok := c.messageOnlyTooSoon(pod.UID, cur, want, basis); ok {
		c.queue.AddAfter(key, wait)
		return nil
	}
	if wait, ok := c.stillRefused(pod.UID, want); ok {
		c.queue.AddAfter(key, wait)
		return nil
	}
	cond := publish.WithTransition(want, cur, c.now())
	patch, err := publish.Patch(pod.UID, cond)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, kubeapi.Timeout)
	defer cancel()
	err = c.client.PatchPodStatus(actx, pod.Namespace, pod.Name, types.StrategicMergePatchType, patch)
	switch {
	case err == nil:
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), uidMismatch(err):
		// UID precondition failed or the pod is gone: never ours again.
		c.metrics.APIErrors.WithLabelValues(string(apierrors.ReasonForError(err))).Inc()
		c.note(key, "the pod changed under us; not publishing", "err", err)
		return nil
	case refusedForGood(err):
		c.metrics.APIErrors.WithLabelValues(kubeapi.Reason(err)).Inc()
		c.queue.AddAfter(key, c.refuse(pod, want, err))
		return nil
	default:
		c.metrics.APIErrors.WithLabelValues(kubeapi.Reason(err)).Inc()
		return err
	}
	c.state.sentTo(pod.UID, sentCondition{baseRV: pod.ResourceVersion, cond: cond, at: c.now(), basis: basis})
	c.metrics.Published.WithLabelValues(string(cond.Status)).Inc()
	c.observeLatency(pod.UID, want)
	switch ev, ok := publish.EventFor(cur, want); {
	case c.recorder == nil:
	case j.Released != "":
		c.recorder.Eventf(pod, nil, corev1.EventTypeWarning, publish.ReasonNotObserved, "PublishCondition",
			"held not ready for %s (--not-in-effect-hold-max) with no netready marker, as netready's installer backs off: %s. No longer held: %s",
			c.opts.NotInEffectHoldMax, j.Released, want.Message)
	case ok:
		c.recorder.Eventf(pod, nil, ev.Type, ev.Reason, "PublishCondition", "%s", ev.Note)
	}
	c.log.Info("published", "pod", key, "status", cond.Status, "reason", cond.Reason, "message", cond.Message)
	return nil
}

// refusedForGood reports whether the API server will refuse the same patch
// again whatever the timing: an admission policy or RBAC (403), or a patch
// it finds invalid (422, 400).
func refusedForGood(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// uidMismatch reports whether a patch was refused because the pod's UID is
// not the one the patch names (the pod was recreated under its name). The
// API server answers that with 409, or with 422 on metadata.uid.
func uidMismatch(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, cause := range status.Status().Details.Causes {
		if cause.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// refuse records that the API server refused pod's patch for good, and
// returns when to try again. The first refusal of a pod gets a Warning
// Event; later ones only count.
func (c *Controller) refuse(pod *corev1.Pod, want corev1.PodCondition, err error) time.Duration {
	backoff, again := c.state.refusedFor(pod.UID, want, c.now())
	c.metrics.Refused.WithLabelValues(kubeapi.Reason(err)).Inc()
	c.log.Warn("the API server refused the condition; not sending it again for a while", "pod", pod.Namespace+"/"+pod.Name, "err", err, "retryAfter", backoff)
	if !again && c.recorder != nil {
		c.recorder.Eventf(pod, nil, corev1.EventTypeWarning, publish.ReasonPublishRefused, "PublishCondition",
			"the API server refused condition %s (%v); netready sends it again in %s, backing off to %s. Check the admission policies, netready-settings and the sidecar's RBAC",
			c.opts.ConditionType, err, backoff, refusedMax)
	}
	return backoff
}

// stillRefused reports whether want was refused for pod and its backoff
// has not run out, with how long is left.
func (c *Controller) stillRefused(uid types.UID, want corev1.PodCondition) (time.Duration, bool) {
	return c.state.stillRefused(uid, want, c.now())
}

// messageOnlyTooSoon reports whether want differs from what the pod shows
// only in a message from re-check progress (same status, reason and marker
// files), and this sidecar patched the pod less than messageEvery ago;
// with how long to wait.
func (c *Controller) messageOnlyTooSoon(uid types.UID, cur *corev1.PodCondition, want corev1.PodCondition, basis string) (time.Duration, bool) {
	if cur == nil || cur.Status != want.Status || cur.Reason != want.Reason {
		return 0, false
	}
	s, ok := c.state.lastSent(uid)
	if !ok || s.basis != basis {
		return 0, false
	}
	left := s.at.Add(messageEvery).Sub(c.now())
	return left, left > 0
}

// alreadySent reports whether want was patched onto this very version of
// the pod, which the cache does not show yet: patching again would only
// repeat it.
func (c *Controller) alreadySent(pod *corev1.Pod, want corev1.PodCondition) bool {
	s, ok := c.state.lastSent(pod.UID)
	return ok && s.baseRV == pod.ResourceVersion && publish.Shows(&s.cond, want)
}

// desired is judge's judgement of a gated pod, what judging asks the
// controller to do, and the judgement's basis, which names the marker
// files it comes from as they are on disk (not the re-checks' progress).
func (c *Controller) desired(pod *corev1.Pod, noEndWait bool) (judgement, actions, string) {
	var v podView
	var a actions
	var basis string
	if !pod.Spec.HostNetwork {
		v, a, basis = viewOf(c.readPod(pod), c.started, c.state.hasWorked)
		v.Strays = c.state.strays()
		v.Memory, v.Lost, v.Inherited = c.podMemory(pod, &v)
	}
	j := judge(pod, v, judgeOptions{CondType: c.opts.ConditionType, PendingTimeout: c.opts.PendingTimeout,
		UnobservedGrace: c.opts.UnobservedGrace, UnobservedReady: c.opts.Unobserved == UnobservedReady,
		Backoffs: c.warnings.InstallBackoffs(), HoldMax: c.opts.NotInEffectHoldMax, Off: c.state.isOff(), NoEndWait: noEndWait}, c.now())
	if j.After > 0 {
		c.queue.AddAfter(pod.Namespace+"/"+pod.Name, j.After)
	}
	if j.FromStrays {
		basis = "strays"
	}
	return j, a, basis
}

// podMemory reads what earlier rounds left to remember of pod; whether it
// is lost: unreadable as a memory, or missing while the pod's condition
// says there was one (SandboxChanged always names a gone sandbox); and
// whether it was inherited from an older sidecar's condition. An error of
// reading keeps the pod not ready, as an unreadable marker does, and is
// retried.
func (c *Controller) podMemory(pod *corev1.Pod, v *podView) (m memory, lost, inherited bool) {
	m, err := readMemory(c.opts.StateDir, pod.UID)
	switch {
	case err == nil:
		return m, false, false
	case errors.Is(err, errNoMemory):
		cur := publish.Current(pod, c.opts.ConditionType)
		m, inherited = inheritedMemory(cur)
		return m, cur != nil && cur.Reason == publish.ReasonSandboxChanged && len(m.GoneSandboxes) == 0, inherited
	case errors.Is(err, errMemoryLost):
		c.note(memoryPath(c.opts.StateDir, pod.UID), "the pod's memory cannot be read as one; its markers from before its condition count as gone", "err", err)
		return memory{}, true, false
	}
	v.Unreadable = append(v.Unreadable, publish.Unreadable{Path: memoryPath(c.opts.StateDir, pod.UID), Err: err})
	c.queue.AddAfter(pod.Namespace+"/"+pod.Name, c.retryEvery)
	return memory{}, false, false
}
