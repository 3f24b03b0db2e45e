package checks

import (
	"context"
	"fmt"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/ovsdb"
	"github.com/netready/netready/pkg/watch"
)

var _ Check = (*ovnCheck)(nil)

// buildOVSDB makes the check of the pod's OVS Interface (preset
// "ovn-kubernetes", the only one of kind "ovsdb").
func buildOVSDB(in []instance, att *attachment.Attachment, _ *Env) ([]Check, error) {
	return each(in, func(in *instance) (Check, error) {
		return newOVNCheck(in.conf.Socket, att), nil
	})
}

// ovnCheck waits until ovn-controller has installed the pod's flows, as
// ovn-kubernetes' own CNI does: the pod's OVS Interface carries
// external_ids:ovn-installed="true".
//
// From ovn-org/ovn-kubernetes, go-controller/pkg/cni/helper_linux.go:
//   - ConfigureOVS adds the host-side veth to br-int and sets on its
//     Interface external_ids:iface-id=<ifaceID>, iface-id-ver=<pod UID>,
//     attached_mac and sandbox=<sandbox (container) ID>;
//   - waitForPodInterface reads external-ids:iface-id and
//     external-ids:ovn-installed of that Interface until the latter is
//     "true", which ovn-controller sets once the port's flows are in;
//   - for the default network the ifaceID is "<namespace>_<pod name>"
//     (util.GetIfaceId).
//
// netready finds the Interface by sandbox=<CNI_CONTAINERID> (and, when the
// pod is known, iface-id=<namespace>_<pod>), with an OVSDB select, and
// wakes on an OVSDB monitor of the Interface table.
type ovnCheck struct {
	socket, sandbox, ifaceID string
}

func newOVNCheck(socket string, att *attachment.Attachment) *ovnCheck {
	c := &ovnCheck{socket: socket, sandbox: att.ContainerID}
	if att.Pod.Namespace != "" && att.Pod.Name != "" {
		c.ifaceID = att.Pod.Namespace + "_" + att.Pod.Name
	}
	return c
}

func (c *ovnCheck) Kind() string { return config.KindOVSDB }

func (c *ovnCheck) Target() string {
	return fmt.Sprintf("ovn-kubernetes Interface sandbox=%s ovn-installed", c.sandbox)
}

func (c *ovnCheck) Sources() []watch.Source {
	return []watch.Source{{Kind: watch.OVSDB, Path: c.socket}}
}

func (c *ovnCheck) Probe(ctx context.Context) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, httpRequestTimeout)
	defer cancel()
	where := []any{[]any{"external_ids", "includes", []any{"map", [][2]string{{"sandbox", c.sandbox}}}}}
	rows, err := ovsdb.Select(ctx, c.socket, "Open_vSwitch", "Interface", where, []string{"name", "external_ids"})
	if err != nil {
		return false, err.Error(), nil
	}
	if len(rows) == 0 {
		return false, "no OVS Interface with external_ids:sandbox=" + c.sandbox + " yet", nil
	}
	var why string
	for _, r := range rows {
		name := string(r["name"])
		id, _ := ovsdb.MapValue(r["external_ids"], "iface-id")
		if c.ifaceID != "" && id != c.ifaceID {
			why = fmt.Sprintf("Interface %s has iface-id %q, not %q", name, id, c.ifaceID)
			continue
		}
		switch v, ok := ovsdb.MapValue(r["external_ids"], "ovn-installed"); {
		case !ok:
			why = fmt.Sprintf("Interface %s (iface-id %s) has no ovn-installed yet: ovn-controller has not installed its flows", name, id)
		case v != "true":
			why = fmt.Sprintf("Interface %s (iface-id %s) has ovn-installed=%q", name, id, v)
		default:
			return true, "", nil
		}
	}
	return false, why, nil
}
