// Package attachment owns the identity of one pod attachment: which network,
// container and interface it is, where its netns lives, which pod it serves
// and which IPs the chain gave it.
package attachment

import (
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/utils"
)

// Pod names the Kubernetes pod behind an attachment, from CNI_ARGS.
type Pod struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

// IP is one pod address with its gateway, if the result gave one.
type IP struct {
	Address net.IPNet
	Gateway net.IP
}

// Attachment is one (network, containerID, ifName) triple and what it has.
type Attachment struct {
	Network     string
	ContainerID string
	IfName      string
	NetNS       string
	Pod         Pod
	IPs         []IP
}

// Validate refuses identities that are not safe as file names.
func (a *Attachment) Validate() error {
	if err := utils.ValidateNetworkName(a.Network); err != nil {
		return fmt.Errorf("network name %q: %s", a.Network, err.Msg)
	}
	if err := utils.ValidateContainerID(a.ContainerID); err != nil {
		return fmt.Errorf("container ID %q: %s", a.ContainerID, err.Msg)
	}
	if err := utils.ValidateInterfaceName(a.IfName); err != nil {
		return fmt.Errorf("interface name %q: %s", a.IfName, err.Msg)
	}
	return nil
}

// ParsePod reads K8S_POD_* from CNI_ARGS; other keys are ignored.
func ParsePod(cniArgs string) (Pod, error) {
	var args struct {
		types.CommonArgs
		K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // CNI_ARGS key
		K8S_POD_NAME      types.UnmarshallableString //nolint:revive // CNI_ARGS key
		K8S_POD_UID       types.UnmarshallableString //nolint:revive // CNI_ARGS key
	}
	args.IgnoreUnknown = true
	if err := types.LoadArgs(cniArgs, &args); err != nil {
		return Pod{}, fmt.Errorf("cannot parse CNI_ARGS: %w", err)
	}
	return Pod{Namespace: string(args.K8S_POD_NAMESPACE), Name: string(args.K8S_POD_NAME), UID: string(args.K8S_POD_UID)}, nil
}

// PodIPs returns the IPs of prevResult that belong to the sandbox interface:
// those whose interface is in a sandbox, or that name no interface.
func PodIPs(prev types.Result, ifName string) ([]IP, error) {
	res, err := current.NewResultFromResult(prev)
	if err != nil {
		return nil, fmt.Errorf("cannot convert prevResult: %w", err)
	}
	var ips []IP
	for _, ipc := range res.IPs {
		if ipc.Interface != nil {
			i := *ipc.Interface
			if i < 0 || i >= len(res.Interfaces) {
				return nil, fmt.Errorf("prevResult: ip %s names interface %d, but there are %d", ipc.Address.String(), i, len(res.Interfaces))
			}
			iface := res.Interfaces[i]
			if iface.Sandbox == "" || (iface.Name != "" && iface.Name != ifName) {
				continue
			}
		}
		ips = append(ips, IP{Address: ipc.Address, Gateway: ipc.Gateway})
	}
	return ips, nil
}

// IPStrings lists the pod IPs with prefix length, as markers record them.
func (a *Attachment) IPStrings() []string {
	out := make([]string, 0, len(a.IPs))
	for _, ip := range a.IPs {
		out = append(out, ip.Address.String())
	}
	return out
}
