package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/marker"
)

// waitCrossNode runs the cross-node wait ("crossNode"), once the pod's own
// node has programmed it, with its own bound. Its result joins the
// marker's check results, so onTimeout treats it as any other check.
func waitCrossNode(conf *config.NetConf, att *attachment.Attachment, log *slog.Logger) marker.CheckResult {
	ctx, cancel := context.WithTimeout(context.Background(), conf.CrossNode.Timeout)
	defer cancel()
	cn := checks.WaitOVNCrossNode(ctx, conf.CrossNode, ovnIfaceID(att.Pod), filepath.Join(conf.StateDir, att.Network))
	if len(cn.LeftOut) > 0 {
		log.Warn("cross-node wait: stalled chassis left out", "leftOut", strings.Join(cn.LeftOut, "; "))
	}
	if !cn.Ready && len(cn.Waiting) > 0 {
		log.Warn("cross-node wait: chassis not at the barrier", "waiting", strings.Join(cn.Waiting, "; "))
	}
	log.Info("cross-node wait done", "ready", cn.Ready, "target", cn.Target, "bumped", cn.Bumped, "pacedMs", cn.Paced.Milliseconds(), "waitedMs", cn.Waited.Milliseconds(), "why", cn.Why)
	r := marker.CheckResult{Kind: checks.KindOVNCrossNode, Target: cn.Target, Ready: cn.Ready, Why: cn.Why, Note: cn.Note}
	if cn.Ready {
		r.WaitedMs = cn.Waited.Milliseconds()
	}
	return r
}

// waitLimit is the bound that the unmet checks ran into: the cross-node
// wait's own when it is the one unmet.
func waitLimit(conf *config.NetConf, rs []marker.CheckResult) time.Duration {
	for _, r := range rs {
		if !r.Ready && r.Kind != checks.KindOVNCrossNode {
			return conf.Timeout
		}
	}
	if conf.CrossNode != nil {
		return conf.CrossNode.Timeout
	}
	return conf.Timeout
}

// ovnIfaceID is the pod's logical port as ovn-kubernetes names it, or ""
// when CNI_ARGS do not name the pod.
func ovnIfaceID(pod attachment.Pod) string {
	if pod.Namespace == "" || pod.Name == "" {
		return ""
	}
	return pod.Namespace + "_" + pod.Name
}

// pendingOf is what a pending marker carries for the sidecar's re-check:
// the checks, and the cross-node wait to run once they hold.
func pendingOf(conf *config.NetConf, att *attachment.Attachment) *marker.Pending {
	p := &marker.Pending{Checks: conf.Checks, Gateways: marker.Gateways(att)}
	if conf.CrossNode == nil {
		return p
	}
	if conf.CrossNodeVia() == config.PresetCilium {
		p.CiliumPublished = att.Pod.Namespace != "" && att.Pod.Name != ""
		p.CiliumSettleMs = conf.CrossNode.Settle.Milliseconds()
		return p
	}
	p.CrossNode, p.OVNIfaceID = conf.CrossNode, ovnIfaceID(att.Pod)
	return p
}

// ciliumLeftToSidecar is the cross-node result of a Cilium ADD whose own
// node holds: not met yet, for the sidecar's re-check to confirm.
func ciliumLeftToSidecar(pod attachment.Pod) marker.CheckResult {
	return marker.CheckResult{Kind: checks.KindCiliumPublished, Target: checks.CiliumPublishedTarget(pod.Namespace, pod.Name),
		Why: "left to the sidecar: ADD does not read the API server"}
}
