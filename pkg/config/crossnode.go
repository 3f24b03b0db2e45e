package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Cross-node wait defaults (docs/configuration.md, "crossNode").
const (
	// DefaultCrossNodeTimeout bounds the cross-node wait, on top of
	// "timeout" (the local wait).
	DefaultCrossNodeTimeout = 5 * time.Second
	// DefaultStallAfter is how long a chassis may stay behind netready's
	// barrier before it is left out as stalled. It sits well above the
	// catch-up of a busy but healthy chassis (tens of ms here), so that
	// only a frozen or disconnected one is left out.
	DefaultStallAfter = 3 * time.Second
	// DefaultRaiseInterval paces netready's raises of OVN's barrier
	// cluster-wide: at most about five a second, so that every chassis
	// writes its Chassis_Private that often at most, whatever the pod
	// start rate. A pod that finds a raise this fresh waits at most this
	// long for the next.
	DefaultRaiseInterval = 200 * time.Millisecond
	// MaxRaiseInterval keeps that wait a small share of the cross-node
	// wait.
	MaxRaiseInterval = time.Second
	// MaxCrossNodeTimeout keeps ADD, both waits together, within
	// MaxTimeout.
	MaxCrossNodeTimeout = 30 * time.Second
	// DefaultOVNNBSocket and DefaultOVNSBSocket are where ovn-kubernetes'
	// node (in interconnect mode, its zone's databases) serves the OVN
	// northbound and southbound databases.
	DefaultOVNNBSocket = "/var/run/ovn/ovnnb_db.sock"
	DefaultOVNSBSocket = "/var/run/ovn/ovnsb_db.sock"
	// MaxSettle bounds Cilium's statistical hold: it delays every gated
	// pod, and a propagation that needs longer is an incident, not a
	// spread to wait out.
	MaxSettle = 10 * time.Second
)

// CrossNodeConf is the top-level "crossNode" key: after the pod's own node
// has programmed it, wait until what the other nodes learn it from holds
// it. With ovn-kubernetes, ADD waits on OVN's barrier (nb_cfg) until the
// other chassis have programmed it, and every key but "settle" applies;
// with Cilium, the sidecar waits until the pod's CiliumEndpoint is
// published, then "settle" longer if set, and no other key applies.
type CrossNodeConf struct {
	TimeoutRaw       string `json:"timeout,omitempty"`
	StallAfterRaw    string `json:"stallAfter,omitempty"`
	RaiseIntervalRaw string `json:"raiseInterval,omitempty"`
	// NBSocket and SBSocket are the unix sockets of the OVN databases.
	NBSocket string `json:"nbSocket,omitempty"`
	SBSocket string `json:"sbSocket,omitempty"`
	// SettleRaw (Cilium only): how long the sidecar still holds the pod's
	// readiness once its CiliumEndpoint is published, for the other
	// nodes' agents to learn it. Statistical: nothing confirms they have.
	SettleRaw string `json:"settle,omitempty"`

	// Timeout, StallAfter and RaiseInterval are their raw keys parsed.
	Timeout       time.Duration `json:"-"`
	StallAfter    time.Duration `json:"-"`
	RaiseInterval time.Duration `json:"-"`
	Settle        time.Duration `json:"-"`
}

// crossNodeKey is the top-level key; decodeCrossNode reports near misses of
// it, as nearMisses does for the other keys.
const crossNodeKey = "crossNode"

// decodeCrossNode decodes, defaults and validates "crossNode" into conf;
// it needs conf's "preset" and "checks" decoded. Each error names its key.
func decodeCrossNode(top map[string]json.RawMessage, conf *NetConf) []error {
	var errs []error
	for k := range top {
		if k != crossNodeKey && editDistance(strings.ToLower(k), strings.ToLower(crossNodeKey)) <= 2 {
			errs = append(errs, fmt.Errorf("unknown key %q: did you mean %q?", k, crossNodeKey))
		}
	}
	raw, ok := top[crossNodeKey]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return errs
	}
	var cn CrossNodeConf
	if err := StrictUnmarshal(raw, &cn); err != nil {
		return append(errs, fmt.Errorf("%s: %w", crossNodeKey, err))
	}
	switch conf.CrossNodeVia() {
	case PresetCilium:
		errs = append(errs, ciliumCrossNodeKeys(&cn)...)
		conf.CrossNode = &cn
		return errs
	case "":
		if usesOVNPreset(conf) {
			return append(errs, fmt.Errorf(`%s: the entry checks both ovn-kubernetes and cilium: the cross-node part follows one plugin; keep the checks of the one the node runs`, crossNodeKey))
		}
		return append(errs, fmt.Errorf(`%s: needs the "ovn-kubernetes" preset (top-level "preset" or an "ovsdb" check), whose barrier ADD waits on, or the "cilium" preset (top-level "preset" or an "http" check with it), whose CiliumEndpoint the sidecar waits on`, crossNodeKey))
	}
	if cn.SettleRaw != "" {
		errs = append(errs, fmt.Errorf(`%s: "settle" applies to the cilium preset only: with ovn-kubernetes, ADD waits on OVN's barrier until the other chassis have programmed the pod, which needs no statistical hold; remove "settle"`, crossNodeKey))
	}
	cn.Defaults()
	if err := cn.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", crossNodeKey, err))
	}
	local := DefaultTimeout
	if d, err := time.ParseDuration(conf.TimeoutRaw); err == nil {
		local = d
	}
	if cn.Timeout > 0 && local+cn.Timeout > MaxTimeout {
		errs = append(errs, fmt.Errorf(`%s: "timeout" %q plus the top-level "timeout" %q must be <= %s, kubelet's share for netready`, crossNodeKey, cn.TimeoutRaw, local, MaxTimeout))
	}
	// Under "fail", a stalled chassis must be left out within the wait, or
	// one frozen node fails every ADD. Under "proceed" the sidecar goes on
	// waiting after the timeout, and leaves it out there.
	if conf.OnTimeout != OnTimeoutProceed && cn.Timeout > 0 && cn.StallAfter >= cn.Timeout {
		errs = append(errs, fmt.Errorf(`%s: "stallAfter" %q must be shorter than "timeout" %q under onTimeout "fail", or one stalled node times every pod out`, crossNodeKey, cn.StallAfterRaw, cn.TimeoutRaw))
	}
	conf.CrossNode = &cn
	return errs
}

// CrossNodeVia names the plugin whose cross-node part "crossNode" follows:
// PresetOVNKubernetes (ADD waits on OVN's barrier), PresetCilium (the
// sidecar holds the pod's readiness until its CiliumEndpoint is
// published; ADD does not wait), or "" when the entry checks neither or
// both.
func (c *NetConf) CrossNodeVia() string {
	ovn, cilium := usesOVNPreset(c), usesCiliumPreset(c)
	switch {
	case ovn && !cilium:
		return PresetOVNKubernetes
	case cilium && !ovn:
		return PresetCilium
	}
	return ""
}

// usesCiliumPreset reports whether the entry checks the Cilium agent's
// endpoint, whose CiliumEndpoint the cross-node part reads.
func usesCiliumPreset(conf *NetConf) bool {
	if conf.Preset == PresetCilium {
		return true
	}
	for _, cc := range conf.Checks {
		if cc.Kind == KindHTTP && cc.Preset == PresetCilium {
			return true
		}
	}
	return false
}

// ciliumCrossNodeKeys refuses, each by name, the keys that bound or steer
// OVN's barrier: with Cilium, ADD does not wait across nodes, so none of
// them would do anything. It parses "settle", Cilium's one key, into cn.
func ciliumCrossNodeKeys(cn *CrossNodeConf) []error {
	var errs []error
	if cn.SettleRaw != "" {
		d, err := time.ParseDuration(cn.SettleRaw)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf(`%s: "settle" %q is not a Go duration such as "300ms"`, crossNodeKey, cn.SettleRaw))
		case d <= 0 || d > MaxSettle:
			errs = append(errs, fmt.Errorf(`%s: "settle" %q must be > 0 and <= %s (leave it out for no hold)`, crossNodeKey, cn.SettleRaw, MaxSettle))
		default:
			cn.Settle = d
		}
	}
	for _, k := range []struct{ key, val string }{{"timeout", cn.TimeoutRaw}, {"stallAfter", cn.StallAfterRaw},
		{"raiseInterval", cn.RaiseIntervalRaw}, {"nbSocket", cn.NBSocket}, {"sbSocket", cn.SBSocket}} {
		if k.val != "" {
			errs = append(errs, fmt.Errorf(`%s: %q applies to the ovn-kubernetes preset only: with "cilium", ADD does not wait across nodes; the sidecar holds the pod's readiness until its CiliumEndpoint is published. Write "crossNode": {}, or {"settle": "300ms"} to hold it longer`, crossNodeKey, k.key))
		}
	}
	return errs
}

// usesOVNPreset reports whether the entry checks ovn-kubernetes' own
// readiness, which the cross-node wait follows.
func usesOVNPreset(conf *NetConf) bool {
	if conf.Preset == PresetOVNKubernetes {
		return true
	}
	for _, cc := range conf.Checks {
		if cc.Kind == KindOVSDB || cc.Preset == PresetOVNKubernetes {
			return true
		}
	}
	return false
}

// Defaults fills in the keys "crossNode" left out.
func (c *CrossNodeConf) Defaults() {
	if c.TimeoutRaw == "" {
		c.TimeoutRaw = DefaultCrossNodeTimeout.String()
	}
	if c.StallAfterRaw == "" {
		c.StallAfterRaw = DefaultStallAfter.String()
	}
	if c.RaiseIntervalRaw == "" {
		c.RaiseIntervalRaw = DefaultRaiseInterval.String()
	}
	if c.NBSocket == "" {
		c.NBSocket = DefaultOVNNBSocket
	}
	if c.SBSocket == "" {
		c.SBSocket = DefaultOVNSBSocket
	}
}

// Validate returns every problem at once, each naming its key. How
// stallAfter compares with timeout depends on onTimeout, which
// decodeCrossNode checks.
func (c *CrossNodeConf) Validate() error {
	var errs []error
	duration := func(key, raw string, limit time.Duration, into *time.Duration) {
		d, err := time.ParseDuration(raw)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf(`%q %q is not a Go duration such as "5s"`, key, raw))
		case d <= 0 || d > limit:
			errs = append(errs, fmt.Errorf(`%q %q must be > 0 and <= %s`, key, raw, limit))
		default:
			*into = d
		}
	}
	duration("timeout", c.TimeoutRaw, MaxCrossNodeTimeout, &c.Timeout)
	duration("stallAfter", c.StallAfterRaw, MaxCrossNodeTimeout, &c.StallAfter)
	// "0s" raises at once, for each pod that finds no raise to join.
	if d, err := time.ParseDuration(c.RaiseIntervalRaw); err != nil || d < 0 || d > MaxRaiseInterval {
		errs = append(errs, fmt.Errorf(`"raiseInterval" %q must be a Go duration >= 0 and <= %s`, c.RaiseIntervalRaw, MaxRaiseInterval))
	} else {
		c.RaiseInterval = d
	}
	for _, s := range []struct{ key, path string }{{"nbSocket", c.NBSocket}, {"sbSocket", c.SBSocket}} {
		if !filepath.IsAbs(s.path) {
			errs = append(errs, fmt.Errorf(`%q %q must be the absolute path of a unix socket`, s.key, s.path))
		}
	}
	if c.Timeout > 0 && c.RaiseInterval >= c.Timeout {
		errs = append(errs, fmt.Errorf(`"raiseInterval" %q must be shorter than "timeout" %q`, c.RaiseIntervalRaw, c.TimeoutRaw))
	}
	return errors.Join(errs...)
}
