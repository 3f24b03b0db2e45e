//go:build integration

package cnitest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netready/netready/test/harness"
)

// HostLocal allocates and releases addresses with the real host-local
// plugin, as a main plugin's ADD and DEL do.
type HostLocal struct {
	Network string
	IPAM    string // the ipam object
	Netns   string // any netns but ours: host-local only checks that
}

// Run runs host-local with CNI_COMMAND cmd for container id.
func (h *HostLocal) Run(cmd, id string) error {
	c := exec.Command(filepath.Join(harness.CNIBinDir, "host-local"))
	c.Env = []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + h.Netns, "CNI_IFNAME=eth0", "CNI_PATH=" + harness.CNIBinDir}
	c.Stdin = strings.NewReader(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","ipam":%s}`, h.Network, h.IPAM))
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("host-local %s %s: %v: %s", cmd, id, err, out)
	}
	return nil
}

// Add allocates an address for each id.
func (h *HostLocal) Add(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := h.Run("ADD", id); err != nil {
			t.Fatal(err)
		}
	}
}

// Del releases the address of each id.
func (h *HostLocal) Del(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := h.Run("DEL", id); err != nil {
			t.Fatal(err)
		}
	}
}
