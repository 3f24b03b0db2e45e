package checks

import (
	"fmt"
	"net/url"

	"github.com/netready/netready/pkg/attachment"
)

// ciliumInitIdentity is Cilium's reserved:init identity: a fresh endpoint
// can report "ready" while it still has it, and its traffic is then
// dropped by policy (cilium#35993).
const ciliumInitIdentity = 5

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
	path := "/v1/endpoint/" + url.PathEscape("cni-attachment-id:"+att.ContainerID+":"+att.IfName)
	target := fmt.Sprintf("cilium endpoint cni-attachment-id:%s:%s", att.ContainerID, att.IfName)
	return newHTTPCheck(socket, path, target, ciliumReady)
}

// ciliumReady judges an Endpoint, naming the state it is in.
func ciliumReady(doc any) (bool, string) {
	state, _ := Lookup(doc, "status.state")
	if state != "ready" {
		return false, fmt.Sprintf("endpoint state is %s", show(state))
	}
	id, _ := Lookup(doc, "status.identity.id")
	if n, ok := id.(float64); !ok || n == ciliumInitIdentity {
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
