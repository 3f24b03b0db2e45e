package conditions

import (
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/status"
)

// ReasonInvalidConfig is the reason of the Node Event for a netready entry
// that ADD and STATUS refused: STATUS stays green for it, so this Event
// and netready_config_invalid are where an operator sees it.
const ReasonInvalidConfig = "NetreadyConfigInvalid"

// readConfigNote follows a network folder's note of a refused entry
// (status.InvalidConfigFile): a new message is a Warning Event on the
// Node and sets netready_config_invalid; its removal clears the metric.
// The main loop alone calls it.
func (c *Controller) readConfigNote(dir string) {
	network := filepath.Base(dir)
	msg := ""
	if data, err := os.ReadFile(filepath.Join(dir, status.InvalidConfigFile)); err == nil {
		msg = strings.TrimSpace(string(data))
	}
	if c.configNotes[network] == msg {
		return
	}
	if msg == "" {
		delete(c.configNotes, network)
		c.metrics.ConfigInvalid.WithLabelValues(network).Set(0)
		c.log.Info("the netready entry is accepted again", "network", network)
		return
	}
	c.configNotes[network] = msg
	c.metrics.ConfigInvalid.WithLabelValues(network).Set(1)
	c.log.Warn("the netready entry is invalid: ADD refuses it (code 7); STATUS stays green", "network", network, "err", msg)
	if c.recorder != nil {
		// As kubelet refers to its Node in Events: the UID is the name.
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.opts.NodeName, UID: types.UID(c.opts.NodeName)}}
		c.recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonInvalidConfig, "ValidateConfig",
			"%s: pods of this network fail to start until the entry is fixed (netready-install --validate checks one); the node stays Ready", msg)
	}
}
