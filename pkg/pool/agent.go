package pool

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	netendpoint "github.com/netready/netready/pkg/endpoint"
	"github.com/netready/netready/pkg/httpget"
)

// readBudget bounds one read of an agent, whatever the caller's deadline:
// STATUS must answer within a second even when an agent hangs.
const readBudget = 750 * time.Millisecond

// endpoint is an agent's address: a unix socket, or an IP literal on
// loopback. A name is never resolved ("localhost" is 127.0.0.1).
type endpoint struct {
	raw  string
	dial func(context.Context) (net.Conn, error)
	host string
	// path is the URL's path: a base for introspection, the whole target
	// for metrics.
	path string
}

func parseEndpoint(raw string) (endpoint, error) {
	e, err := netendpoint.Parse(raw)
	if err != nil {
		return endpoint{}, err
	}
	ep := endpoint{raw: raw, host: e.Host, dial: e.Dial}
	if e.Network != "unix" {
		ep.path = strings.TrimSuffix(e.URL.EscapedPath(), "/")
	}
	return ep, nil
}

// get sends GET target and returns the body of a 200 answer, of at most
// maxBody bytes, within ctx and readBudget.
func (e endpoint) get(ctx context.Context, target string, maxBody int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, readBudget)
	defer cancel()
	resp, err := httpget.Get(ctx, e.dial, e.host, target, true, maxBody)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", e.name(target), err)
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: %s", e.name(target), resp.Status)
	}
	if len(resp.Body) > maxBody {
		return nil, fmt.Errorf("GET %s: the answer is larger than %d bytes", e.name(target), maxBody)
	}
	return resp.Body, nil
}

// name is the endpoint and target as messages show them.
func (e endpoint) name(target string) string {
	if strings.HasPrefix(e.raw, "unix:") {
		return e.raw + " " + target
	}
	return "http://" + e.host + target
}
