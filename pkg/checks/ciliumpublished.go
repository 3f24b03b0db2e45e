package checks

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/endpoint"
	"github.com/netready/netready/pkg/httpget"
)

// KindCiliumPublished names, in the marker, the result of the Cilium
// cross-node part: the pod's CiliumEndpoint, which the other nodes'
// agents learn the pod from, holds what its own agent has (KEP-5709's
// "publish before ready"). The sidecar decides it (package pending).
const KindCiliumPublished = "cilium-endpoint-published"

// CiliumPublishedTarget is that result's target for the pod ns/name.
func CiliumPublishedTarget(namespace, name string) string {
	return fmt.Sprintf("CiliumEndpoint %s/%s holds the endpoint's container, identity and IPs", namespace, name)
}

// CiliumLocal is what the pod's own agent has of its endpoint.
type CiliumLocal struct {
	ID       int64
	Identity int64
}

// CiliumEndpointOf asks the agent at socket (a unix:// URL) for att's
// endpoint: its id and security identity, as the agent has them now.
func CiliumEndpointOf(ctx context.Context, socket string, att *attachment.Attachment) (CiliumLocal, error) {
	e, err := endpoint.Parse(socket)
	if err != nil {
		return CiliumLocal{}, fmt.Errorf("cilium agent url: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, httpRequestTimeout)
	defer cancel()
	path := ciliumEndpointPath(att)
	resp, err := httpget.Get(ctx, e.Dial, e.Host, path, true, maxHTTPBody)
	if err != nil {
		return CiliumLocal{}, fmt.Errorf("cilium agent at %s: %w", socket, err)
	}
	if resp.StatusCode != 200 {
		return CiliumLocal{}, fmt.Errorf("cilium agent at %s: GET %s answered %s", socket, path, resp.Status)
	}
	var doc struct {
		ID     int64 `json:"id"`
		Status struct {
			Identity struct {
				ID int64 `json:"id"`
			} `json:"identity"`
		} `json:"status"`
	}
	if err := json.Unmarshal(resp.Body, &doc); err != nil {
		return CiliumLocal{}, fmt.Errorf("cilium agent at %s: the endpoint is not JSON: %w", socket, err)
	}
	return CiliumLocal{ID: doc.ID, Identity: doc.Status.Identity.ID}, nil
}
