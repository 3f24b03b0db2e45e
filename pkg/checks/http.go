package checks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/endpoint"
	"github.com/netready/netready/pkg/httpget"
	"github.com/netready/netready/pkg/watch"
)

var _ Check = (*httpCheck)(nil)

// buildHTTP makes an http check once, or per pod IP when its strings use
// {{.IP}}; with preset "cilium", the check of the pod's Cilium endpoint.
func buildHTTP(in []instance, att *attachment.Attachment, _ *Env) ([]Check, error) {
	return each(in, func(in *instance) (Check, error) {
		if in.conf.Preset == config.PresetCilium {
			return ciliumCheck(in.conf.URL, att)
		}
		return NewHTTPCheck(in.conf.URL, in.conf.Path, ExpectJudge(in.conf.Expect))
	})
}

// httpCheck: a loopback or unix-socket endpoint answers 2xx, and, with a
// judge, its JSON answer says ready.
type httpCheck struct {
	client *httpget.Client
	host   string // the Host header
	path   string // the request target: path and query
	target string // what messages show
	judge  Judge
}

// Judge reads an endpoint's decoded JSON answer: ready, or why not.
type Judge func(doc any) (bool, string)

// maxHTTPBody bounds how much of an answer is read.
const maxHTTPBody = 1 << 20

// httpRequestTimeout caps one request, so that an endpoint that hangs once
// is asked again before the deadline.
const httpRequestTimeout = time.Second

// NewHTTPCheck checks that a loopback http:// or unix:// endpoint answers
// 2xx and, if judge is not nil, that judge finds its JSON answer ready. A
// 404 is "not yet". STATUS uses it for agents too.
func NewHTTPCheck(raw, path string, judge Judge) (Check, error) {
	return newHTTPCheck(raw, path, "", judge)
}

// newHTTPCheck is NewHTTPCheck with the target messages show; "" means
// the URL. Never a proxy, never DNS, never a redirect: only the loopback
// address or the socket is dialled.
func newHTTPCheck(raw, path, target string, judge Judge) (*httpCheck, error) {
	e, err := endpoint.Parse(raw)
	if err != nil {
		return nil, never("url %v", err)
	}
	c := &httpCheck{target: target, judge: judge, client: &httpget.Client{Dial: e.Dial}}
	if e.Network == "unix" {
		if path == "" {
			path = "/"
		}
		c.host, c.path = e.Host, path
		if c.target == "" {
			c.target = raw + " " + path
		}
	} else {
		c.host, c.path = e.Host, e.URL.RequestURI()
		if c.target == "" {
			c.target = raw
		}
	}
	return c, nil
}

func (c *httpCheck) Kind() string            { return config.KindHTTP }
func (c *httpCheck) Target() string          { return c.target }
func (c *httpCheck) Sources() []watch.Source { return nil }

func (c *httpCheck) Probe(ctx context.Context) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, httpRequestTimeout)
	defer cancel()
	// Polls reuse one connection while the endpoint keeps it open.
	resp, err := c.client.Get(ctx, c.host, c.path, c.judge != nil, maxHTTPBody)
	switch {
	case err != nil:
		return false, fmt.Sprintf("no answer: %v", err), nil
	case resp.StatusCode == 404:
		return false, "not there yet (404)", nil
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return false, fmt.Sprintf("answered %s", resp.Status), nil
	case c.judge == nil:
		return true, "", nil
	case len(resp.Body) > maxHTTPBody:
		return false, fmt.Sprintf("the answer is larger than %d bytes", maxHTTPBody), nil
	}
	var doc any
	if err := json.Unmarshal(resp.Body, &doc); err != nil {
		return false, fmt.Sprintf("the answer is not JSON: %v", err), nil
	}
	ready, why := c.judge(doc)
	return ready, why, nil
}

// CiliumInitIdentity is Cilium's reserved:init identity: a fresh endpoint
// can report "ready" while it still has it, and its traffic is then
// dropped by policy (cilium#35993).
const CiliumInitIdentity = 5

// ciliumCheck asks the Cilium agent for the pod's endpoint and holds until
// it is programmed: state "ready", an identity of its own, and the policy
// revision in the datapath caught up with the desired one.
//
// From cilium/cilium:
//   - api/v1/openapi.yaml: GET /v1/endpoint/{id} answers an Endpoint, 404
//     while there is none; the id prefix "cni-attachment-id:" takes
//     "<containerID>:<ifName>", what the CNI plugin creates the endpoint
//     with (PUT /endpoint/cni-attachment-id:<CNI_CONTAINERID>:<CNI_IFNAME>);
//   - EndpointStatus: state (EndpointState: waiting-for-identity, not-ready,
//     waiting-to-regenerate, regenerating, restoring, ready, …), identity
//     (Identity: id, labels), policy (EndpointPolicyStatus: spec and
//     realized, each an EndpointPolicy with policy-revision);
//   - pkg/identity: the reserved identity "init" is 5.
func ciliumCheck(socket string, att *attachment.Attachment) (Check, error) {
	target := fmt.Sprintf("cilium endpoint cni-attachment-id:%s:%s", att.ContainerID, att.IfName)
	return newHTTPCheck(socket, ciliumEndpointPath(att), target, ciliumReady)
}

// ciliumEndpointPath is where the agent's API serves att's endpoint.
func ciliumEndpointPath(att *attachment.Attachment) string {
	return "/v1/endpoint/" + url.PathEscape("cni-attachment-id:"+att.ContainerID+":"+att.IfName)
}

// ciliumReady judges an Endpoint, naming the state it is in.
func ciliumReady(doc any) (bool, string) {
	state, _ := Lookup(doc, "status.state")
	if state != "ready" {
		return false, fmt.Sprintf("endpoint state is %s", show(state))
	}
	id, _ := Lookup(doc, "status.identity.id")
	if n, ok := id.(float64); !ok || n == CiliumInitIdentity {
		return false, fmt.Sprintf("endpoint is ready but has the init identity (%s), whose traffic policy drops", show(id))
	}
	realized, _ := Lookup(doc, "status.policy.realized.policy-revision")
	desired, _ := Lookup(doc, "status.policy.spec.policy-revision")
	r, rok := realized.(float64)
	d, dok := desired.(float64)
	if !rok || !dok || r < d {
		return false, fmt.Sprintf("endpoint policy revision %s realized, %s desired", show(realized), show(desired))
	}
	return true, ""
}
