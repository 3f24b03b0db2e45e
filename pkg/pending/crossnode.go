package pending

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/marker"
)

// crossNode is the re-check's wait for the other nodes (the entry's
// "crossNode", carried in the pending marker), run once the local checks
// hold, as ADD runs it: the same barrier, the same stalled-chassis rule,
// and the same note of chassis behind in the network's folder, which ADD
// and the re-check share.
type crossNode struct {
	conf    config.CrossNodeConf
	ifaceID string
	memoDir string
}

// crossWait is a cross-node part, run once the local checks hold: its
// result joins the marker's.
type crossWait interface {
	wait(ctx context.Context, bound time.Duration, created time.Time) marker.CheckResult
}

// crossNodeOf is m's cross-node part, or nil when its marker carries none
// (crossNode off, or a plugin from before it): Cilium's published
// CiliumEndpoint, or OVN's barrier.
func crossNodeOf(in Inputs, m *marker.Marker, att *attachment.Attachment) (crossWait, error) {
	if m.Pending.CiliumPublished {
		x := ciliumPublishedOf(m, att, in.CiliumEndpoints)
		x.off = in.Off
		return x, nil
	}
	if m.Pending.CrossNode == nil {
		return nil, nil
	}
	store := in.Store
	// The marker carries the keys as written; their parsed durations are
	// not part of it.
	cn := *m.Pending.CrossNode
	cn.Defaults()
	if err := cn.Validate(); err != nil {
		return nil, fmt.Errorf("the pending marker's crossNode: %w", err)
	}
	return &crossNode{conf: cn, ifaceID: m.Pending.OVNIfaceID, memoDir: filepath.Join(store.Dir, m.Network)}, nil
}

// wait runs the cross-node wait for at most bound. The result's waitedMs
// counts from the marker's ADD, as the local checks' do in a re-check.
func (x *crossNode) wait(ctx context.Context, bound time.Duration, created time.Time) marker.CheckResult {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	cn := checks.WaitOVNCrossNode(ctx, &x.conf, x.ifaceID, x.memoDir)
	r := marker.CheckResult{Kind: checks.KindOVNCrossNode, Target: cn.Target, Ready: cn.Ready, Why: cn.Why, Note: cn.Note}
	if cn.Ready {
		r.WaitedMs = time.Since(created).Milliseconds()
	}
	return r
}
