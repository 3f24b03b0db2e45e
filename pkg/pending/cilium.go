package pending

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/marker"
)

// CiliumEndpoints reads a pod's CiliumEndpoint (cilium.io/v2) from the API
// server, as JSON; while the pod has none, its error wraps fs.ErrNotExist.
// kubeapi.REST does, from the API server's cache.
type CiliumEndpoints interface {
	GetCiliumEndpoint(ctx context.Context, namespace, name string) ([]byte, error)
}

// ciliumEndpoint is what of a CiliumEndpoint's status the other nodes'
// agents learn the pod from (cilium/cilium pkg/k8s/apis/cilium.io/v2
// EndpointStatus): the endpoint's id, the container it was made for, its
// security identity and its IPs.
type ciliumEndpoint struct {
	Status struct {
		ID int64 `json:"id"`
		// "<container>:<ifname>", the id the agent's endpoint is
		// looked up by.
		ExternalIdentifiers struct {
			CNIAttachmentID string `json:"cni-attachment-id"`
		} `json:"external-identifiers"`
		Identity *struct {
			ID int64 `json:"id"`
		} `json:"identity"`
		Networking *struct {
			Addressing []struct {
				IPv4 string `json:"ipv4"`
				IPv6 string `json:"ipv6"`
			} `json:"addressing"`
		} `json:"networking"`
	} `json:"status"`
}

// ciliumPublished is the Cilium cross-node part: before the pod is ready,
// its CiliumEndpoint must be this sandbox's and hold the identity its own
// agent gave it and every IP of the attachment. Other nodes' agents can
// learn no more than that; whether they have is not visible (no barrier).
type ciliumPublished struct {
	socket  string // the agent's API, from the cilium check
	pod     attachment.Pod
	att     *attachment.Attachment
	ips     []string
	cilium  CiliumEndpoints
	pollMin time.Duration
	pollMax time.Duration
	// gap is the pause before the next read. It carries over from one
	// round to the next, so that a CiliumEndpoint that never comes costs
	// one read per pollMax, not a burst per round.
	gap time.Duration
	// settle is crossNode's "settle": how long after publishedAt, when the
	// CiliumEndpoint was first seen published, the result stays unmet.
	// publishedAt carries over rounds as gap does, and is reset by a look
	// that finds it gone or not this sandbox's.
	settle      time.Duration
	publishedAt time.Time
	off         func() bool // Inputs.Off
}

// The CiliumEndpoint is read again after pollMin, doubling up to pollMax:
// the agent writes it a few ms after the endpoint, and a read served from
// the API server's cache costs little. An error other than "not yet"
// (forbidden, no such resource) goes to pollMax at once.
const (
	ciliumPollMin = 50 * time.Millisecond
	ciliumPollMax = 5 * time.Second
	// ciliumReadTimeout bounds one look: the agent's answer and the
	// CiliumEndpoint's read, with any wait for client-go's rate limiter.
	ciliumReadTimeout = 10 * time.Second
)

// ciliumPublishedOf is m's Cilium cross-node part.
func ciliumPublishedOf(m *marker.Marker, att *attachment.Attachment, ceps CiliumEndpoints) *ciliumPublished {
	x := &ciliumPublished{pod: m.Pod, att: att, cilium: ceps, pollMin: ciliumPollMin, pollMax: ciliumPollMax, gap: ciliumPollMin,
		settle: min(time.Duration(m.Pending.CiliumSettleMs)*time.Millisecond, config.MaxSettle)}
	for _, cc := range m.Pending.Checks {
		if cc.Kind == config.KindHTTP && cc.Preset == config.PresetCilium {
			x.socket = cc.URL
		}
	}
	for _, ip := range att.IPs {
		x.ips = append(x.ips, ip.Address.IP.String())
	}
	return x
}

// wait reads the agent's endpoint and the CiliumEndpoint until they agree
// (and then settle has passed), or bound ends.
func (x *ciliumPublished) wait(ctx context.Context, bound time.Duration, created time.Time) marker.CheckResult {
	// The round's bound paces the pauses only. A read runs under its own
	// timeout: under the round's deadline, client-go's rate limiter
	// refuses a read it cannot fit before it, and that refusal would
	// stand as the reason instead of what the CiliumEndpoint says.
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	r := marker.CheckResult{Kind: checks.KindCiliumPublished, Target: checks.CiliumPublishedTarget(x.pod.Namespace, x.pod.Name)}
	for {
		rctx, rcancel := context.WithTimeout(parent, ciliumReadTimeout)
		why, failed := x.unmet(rctx)
		rcancel()
		if parent.Err() != nil {
			// Stopped (the marker or the sidecar went): the last full
			// look says more than a read cut short.
			return r
		}
		if why == "" {
			left := x.settleLeft(time.Now())
			if left <= 0 {
				r.Ready, r.WaitedMs, r.Why, r.Note = true, time.Since(created).Milliseconds(), "", x.settledNote()
				return r
			}
			// A stable text: the hold's progress is not news.
			r.Why = fmt.Sprintf("published; holding for crossNode.settle %s after it, a statistical wait for the other nodes' agents, not a confirmation", x.settle)
			// Sleep the hold out, then look once more: a CiliumEndpoint
			// gone or changed meanwhile (a new sandbox's, say) starts it
			// over; one read per hold, not a poll.
			select {
			case <-ctx.Done():
				return r
			case <-time.After(left):
			}
			continue
		}
		// The hold is kept over a look that could not tell (an error,
		// the off switch); unmet ends it on a CiliumEndpoint found
		// gone or not this sandbox's.
		r.Why = why
		if failed {
			x.gap = x.pollMax
		}
		select {
		case <-ctx.Done():
			return r
		case <-time.After(x.gap):
		}
		x.gap = min(2*x.gap, x.pollMax)
	}
}

// settleLeft is how much of settle is left at now, once published: it
// starts at the first look that finds the CiliumEndpoint published, and
// never exceeds settle, so a clock stepped back cannot stretch it.
func (x *ciliumPublished) settleLeft(now time.Time) time.Duration {
	if x.settle <= 0 {
		return 0
	}
	if x.publishedAt.IsZero() {
		x.publishedAt = now
	}
	return min(x.publishedAt.Add(x.settle).Sub(now), x.settle)
}

// settledNote is the ready result's note: what the ready rests on.
func (x *ciliumPublished) settledNote() string {
	if x.settle <= 0 {
		return "published, whether the other nodes' agents have learned it is not confirmed (no barrier)"
	}
	return fmt.Sprintf("published, then held %s (crossNode.settle): statistical, whether the other nodes' agents have learned it is not confirmed", x.settle)
}

// unmet is why the pod's CiliumEndpoint does not hold what its agent has
// yet, or ""; failed says no answer came that could change soon.
func (x *ciliumPublished) unmet(ctx context.Context) (why string, failed bool) {
	switch {
	case x.pod.Namespace == "" || x.pod.Name == "":
		return "CNI_ARGS name no pod (K8S_POD_NAMESPACE, K8S_POD_NAME), so no CiliumEndpoint is the attachment's", true
	case x.socket == "":
		return `the pending marker has no "cilium" check, whose agent says what the CiliumEndpoint must hold`, true
	case x.cilium == nil:
		return "this sidecar cannot read CiliumEndpoints", true
	case len(x.ips) == 0:
		return "the attachment has no IP to find in the CiliumEndpoint", true
	case x.off != nil && x.off():
		return "netready is switched off: the CiliumEndpoint is not read until it is on again", true
	}
	// The CiliumEndpoint first: while there is none, the agent need not
	// be asked what it should hold.
	data, err := x.cilium.GetCiliumEndpoint(ctx, x.pod.Namespace, x.pod.Name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		x.publishedAt = time.Time{}
		return "not published yet: the API server has no CiliumEndpoint " + x.pod.Namespace + "/" + x.pod.Name, false
	case err != nil:
		return fmt.Sprintf("cannot read the CiliumEndpoint: %v", err), true
	}
	var cep ciliumEndpoint
	if err := json.Unmarshal(data, &cep); err != nil {
		return fmt.Sprintf("the CiliumEndpoint is not one: %v", err), true
	}
	local, err := checks.CiliumEndpointOf(ctx, x.socket, x.att)
	if err != nil {
		return fmt.Sprintf("cannot ask the pod's own agent for its endpoint: %v", err), false
	}
	why = publishedWhy(cep, local, x.att.ContainerID+":"+x.att.IfName, x.ips)
	if why != "" {
		x.publishedAt = time.Time{}
	}
	return why, false
}

// publishedWhy is why cep does not publish the endpoint local of the CNI
// attachment ("<container>:<ifname>") with ips, or "".
func publishedWhy(cep ciliumEndpoint, local checks.CiliumLocal, attachmentID string, ips []string) string {
	st := cep.Status
	if local.ID <= 0 || local.Identity <= 0 || local.Identity == checks.CiliumInitIdentity {
		return fmt.Sprintf("the agent has endpoint id %d and identity %d for the attachment: not final yet", local.ID, local.Identity)
	}
	if got := st.ExternalIdentifiers.CNIAttachmentID; got != attachmentID {
		return fmt.Sprintf("the CiliumEndpoint is another attachment's (%q), not yet this sandbox's", got)
	}
	if st.ID != local.ID {
		return fmt.Sprintf("the CiliumEndpoint has endpoint id %d, the agent %d", st.ID, local.ID)
	}
	if st.Identity == nil || st.Identity.ID != local.Identity {
		got := "none"
		if st.Identity != nil {
			got = fmt.Sprint(st.Identity.ID)
		}
		return fmt.Sprintf("the CiliumEndpoint has identity %s, the agent %d: other nodes would not apply the pod's policy yet", got, local.Identity)
	}
	var have []string
	if st.Networking != nil {
		for _, a := range st.Networking.Addressing {
			for _, s := range []string{a.IPv4, a.IPv6} {
				if ip := net.ParseIP(s); ip != nil {
					have = append(have, ip.String())
				}
			}
		}
	}
	var missing []string
	for _, ip := range ips {
		if !slices.Contains(have, ip) {
			missing = append(missing, ip)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("the CiliumEndpoint lacks the pod's IP %s: other nodes would not know its traffic", strings.Join(missing, ", "))
	}
	return ""
}
