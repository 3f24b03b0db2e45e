package conditions

import (
	"fmt"
	"strings"

	"github.com/netready/netready/pkg/marker"
)

// ReasonPresetNotWriting is the reason of the Node Event for a preset
// whose agent is not set up to write what the preset waits for (Calico's
// Felix without endpointStatusPathPrefix): every pod of the network would
// wait its whole timeout.
const ReasonPresetNotWriting = "NetreadyPresetNotWriting"

// presetPrefixes start the reasons checks give when a preset's agent is
// not set up to write at all (checks.CalicoNotWriting).
var presetPrefixes = []string{"calico preset: "}

// notePresets raises, once per network and message (and again after
// kubeapi.RepeatWarningAfter while it holds), a check of m that says its preset's
// agent is not set up: a Warning Event on the Node and
// netready_preset_not_writing{network} 1. A ready marker of the network
// clears it.
func (c *Controller) notePresets(m *marker.Marker) {
	why := presetNotWriting(m)
	now := c.now()
	changed := c.presetNotes.update(m.Network, func(old standing) (*standing, bool) {
		switch {
		case why != "" && (why != old.msg || old.due(why, now)):
			return &standing{msg: why, raised: now}, true
		case why == "" && old.msg != "" && m.State == marker.StateReady:
			return nil, true
		}
		return nil, false
	})
	if !changed {
		return
	}
	if why == "" {
		c.metrics.PresetNotWriting.WithLabelValues(m.Network).Set(0)
		c.log.Info("the preset's agent writes what it waits for again", "network", m.Network)
		return
	}
	c.metrics.PresetNotWriting.WithLabelValues(m.Network).Set(1)
	c.log.Warn("a preset's agent is not set up to write what netready waits for: every pod of the network waits its whole timeout", "network", m.Network, "why", why)
	then := ""
	if !c.worked.has(m.Network) {
		// As judge gives up on them.
		then = fmt.Sprintf(", and, as it never wrote on this node, its gated pods are judged as pods netready did not see (--unobserved=%s) %s after their ADD began (--not-in-effect-hold-max)",
			c.opts.Unobserved, c.opts.NotInEffectHoldMax)
	}
	c.nodeWarning(ReasonPresetNotWriting, "Check", "network %s: %s. Until then every ADD of the network waits its whole timeout%s", m.Network, why, then)
}

// presetNotWriting returns why m's checks say its preset's agent is not
// set up to write what it waits for, or "".
func presetNotWriting(m *marker.Marker) string {
	why := ""
	for _, ch := range m.Checks {
		for _, p := range presetPrefixes {
			if !ch.Ready && strings.HasPrefix(ch.Why, p) {
				why = ch.Why
			}
		}
	}
	return why
}
