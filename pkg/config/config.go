// Package config owns the netready conflist entry: parsing it, filling in
// defaults and validating every key, so that the verbs get a NetConf they
// can trust.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/types/create"
)

// Defaults from the contract.
const (
	DefaultTimeout = 10 * time.Second
	// MaxTimeout leaves the main plugin its share of kubelet's 2 min
	// runtime request timeout.
	MaxTimeout      = 100 * time.Second
	DefaultStateDir = "/run/netready"
	DefaultConfDir  = "/etc/cni/net.d"

	OnTimeoutFail    = "fail"
	OnTimeoutProceed = "proceed"
)

// NetConf is the netready entry of a conflist, as the runtime sends it.
type NetConf struct {
	types.NetConf

	// Raw keys as written in the conflist.
	TimeoutRaw string      `json:"timeout,omitempty"`
	OnTimeout  string      `json:"onTimeout,omitempty"`
	StateDir   string      `json:"stateDir,omitempty"`
	LogFile    string      `json:"logFile,omitempty"`
	Checks     []CheckConf `json:"checks,omitempty"`
	Status     *StatusConf `json:"status,omitempty"`
	// Preset names the network plugin: address + route (or Checks) plus
	// that plugin's own check.
	Preset string `json:"preset,omitempty"`
	// CrossNode, if set, turns on the wait for the other nodes (crossnode.go).
	CrossNode *CrossNodeConf `json:"crossNode,omitempty"`

	// Timeout is TimeoutRaw parsed.
	Timeout time.Duration `json:"-"`

	// rawPrev is prevResult as sent: decoded once, into its result type,
	// by ParsePrevResult (not first into a generic map, as types.NetConf
	// would, and then encoded and decoded again).
	rawPrev json.RawMessage
}

// Parse decodes stdin, fills in defaults and validates. Errors are CNI
// errors with code 7 whose message names every bad key at once.
func Parse(stdin []byte) (*NetConf, error) {
	conf, problems := parse(stdin)
	if len(problems) > 0 {
		return nil, invalid(errors.Join(problems...))
	}
	return conf, nil
}

// Problems lists every problem of an entry, one error per key, or nil.
func Problems(stdin []byte) []error {
	_, problems := parse(stdin)
	return problems
}

func parse(stdin []byte) (*NetConf, []error) {
	conf, decodeErr := decode(stdin)
	if conf == nil {
		return nil, []error{decodeErr}
	}
	conf.Defaults()
	var problems []error
	for _, err := range []error{decodeErr, conf.Validate()} {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			problems = append(problems, j.Unwrap()...)
		} else if err != nil {
			problems = append(problems, err)
		}
	}
	return conf, problems
}

// ParsePrevResult parses prevResult, which ADD and CHECK require.
func (c *NetConf) ParsePrevResult() error {
	if len(c.rawPrev) == 0 || bytes.Equal(bytes.TrimSpace(c.rawPrev), []byte("null")) {
		return types.NewError(types.ErrInvalidNetworkConfig,
			"netready: no prevResult: netready must be called as a chained plugin, last in a conflist", "")
	}
	// As version.ParsePrevResult: the result's own cniVersion, or the
	// conf's when it has none (results before 1.0.0 may not say).
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	raw := c.rawPrev
	if err := json.Unmarshal(raw, &v); err == nil && v.CNIVersion == "" {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err == nil {
			m["cniVersion"], _ = json.Marshal(c.CNIVersion)
			raw, _ = json.Marshal(m)
		}
	}
	res, err := create.Create(c.CNIVersion, raw)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("netready: cannot parse prevResult: could not parse prevResult: %v", err), "")
	}
	c.PrevResult = res
	return nil
}

// invalid turns a (possibly joined) validation error into CNI error 7 on
// one line, as runtimes show only the first line of a message.
func invalid(err error) error {
	return types.NewError(types.ErrInvalidNetworkConfig, "netready: "+InvalidMessage(err), "")
}

// InvalidMessage is the one-line text of a configuration error, as the
// plugin reports it after "netready: ".
func InvalidMessage(err error) string {
	var e *types.Error
	if errors.As(err, &e) {
		return strings.TrimPrefix(e.Msg, "netready: ")
	}
	return "invalid configuration: " + strings.ReplaceAll(err.Error(), "\n", "; ")
}

// decode unmarshals the entry key by key, so that one bad value does not
// hide the others. The top level is lenient (a conflist entry carries the
// runtime's keys) except for netready's own keys written in the wrong
// case; checks and status are strict. It returns nil only when stdin is
// not a JSON object at all.
func decode(stdin []byte) (*NetConf, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &top); err != nil {
		return nil, fmt.Errorf("cannot decode JSON: %w", err)
	}
	conf := &NetConf{rawPrev: top["prevResult"]}
	var errs []error
	// The CNI keys but prevResult, which ParsePrevResult decodes once.
	if err := decodeCNIKeys(top, &conf.NetConf); err != nil {
		errs = append(errs, fmt.Errorf("cannot decode the CNI keys: %w", err))
	}
	errs = append(errs, nearMisses(top)...)
	// field decodes one key; it reports whether the key was there and valid.
	field := func(key string, v any) bool {
		raw, ok := top[key]
		if !ok {
			return false
		}
		if err := json.Unmarshal(raw, v); err != nil {
			errs = append(errs, fmt.Errorf("%q: %s", key, typeMessage(err)))
			return false
		}
		return true
	}
	if field("timeout", &conf.TimeoutRaw) && conf.TimeoutRaw == "" {
		errs = append(errs, errors.New(`"timeout" is empty: give a Go duration such as "10s"`))
	}
	field("onTimeout", &conf.OnTimeout)
	field("stateDir", &conf.StateDir)
	field("logFile", &conf.LogFile)
	field("preset", &conf.Preset)

	var checks []json.RawMessage
	field("checks", &checks)
	if checks != nil {
		conf.Checks = make([]CheckConf, 0, len(checks))
	}
	for i, raw := range checks {
		var cc CheckConf
		if err := StrictUnmarshal(raw, &cc); err != nil {
			errs = append(errs, fmt.Errorf("checks[%d]: %w", i, err))
			continue
		}
		conf.Checks = append(conf.Checks, cc)
	}
	if raw := top["status"]; len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		var sc StatusConf
		if err := StrictUnmarshal(raw, &sc); err != nil {
			errs = append(errs, fmt.Errorf("status: %w", err))
		} else {
			conf.Status = &sc
		}
	}
	errs = append(errs, decodeCrossNode(top, conf)...)
	return conf, errors.Join(errs...)
}

// decodeCNIKeys decodes types.NetConf's keys from top, prevResult
// excepted.
func decodeCNIKeys(top map[string]json.RawMessage, nc *types.NetConf) error {
	var errs []error
	for _, f := range []struct {
		key string
		v   any
	}{{"cniVersion", &nc.CNIVersion}, {"name", &nc.Name}, {"type", &nc.Type}, {"capabilities", &nc.Capabilities},
		{"ipam", &nc.IPAM}, {"dns", &nc.DNS}, {"cni.dev/valid-attachments", &nc.ValidAttachments}} {
		if raw, ok := top[f.key]; ok {
			if err := json.Unmarshal(raw, f.v); err != nil {
				errs = append(errs, fmt.Errorf("%q: %w", f.key, err))
			}
		}
	}
	return errors.Join(errs...)
}

// topKeys are netready's own top-level keys.
var topKeys = []string{"timeout", "onTimeout", "stateDir", "logFile", "checks", "status", "preset"}

// InjectedKeys are the top-level keys a conflist entry carries besides
// netready's own: the CNI spec's, and what libcni, runtimes and
// multiplexers add. They are always accepted.
var InjectedKeys = []string{
	"cniVersion", "cniVersions", "name", "type", "capabilities", "ipam", "dns",
	"prevResult", "runtimeConfig", "args",
	"cni.dev/valid-attachments", "cni.dev/attachments",
}

// nearMisses reports top-level keys that are not known but look like a
// typo of one: netready's own keys within edit distance 2, or any known
// key in another case. Other unknown keys are accepted, as the spec asks
// of plugins that meet keys meant for others.
func nearMisses(top map[string]json.RawMessage) []error {
	var errs []error
	for k := range top {
		if slices.Contains(topKeys, k) || slices.Contains(InjectedKeys, k) {
			continue
		}
		if want, ok := likelyMeant(k); ok {
			errs = append(errs, fmt.Errorf("unknown key %q: did you mean %q?", k, want))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

// likelyMeant is the known key that k is a typo of, if any.
func likelyMeant(k string) (string, bool) {
	for _, want := range slices.Concat(topKeys, InjectedKeys) {
		if strings.EqualFold(k, want) {
			return want, true
		}
	}
	return closestKey(k, topKeys)
}

// closestKey is the key of known within edit distance 2 of k, in any
// case, that is nearest to it, if any.
func closestKey(k string, known []string) (string, bool) {
	best, bestD := "", 3
	for _, want := range known {
		if d := editDistance(strings.ToLower(k), strings.ToLower(want)); d < bestD {
			best, bestD = want, d
		}
	}
	return best, best != ""
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// caseTypos reports keys that differ from a known key only in case: Go's
// JSON would take them silently, the runtime's reader maybe not.
func caseTypos(obj map[string]json.RawMessage, known []string) []error {
	var errs []error
	for k := range obj {
		for _, want := range known {
			if k != want && strings.EqualFold(k, want) {
				errs = append(errs, fmt.Errorf("unknown key %q: did you mean %q?", k, want))
			}
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

// StrictUnmarshal decodes one JSON object into v, refusing keys that v
// does not have, including known keys in the wrong case.
func StrictUnmarshal(raw []byte, v any) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return errors.New(typeMessage(err))
	}
	known := jsonKeys(v)
	var errs []error
	for k := range obj {
		if slices.Contains(known, k) {
			continue
		}
		if err := caseTypos(map[string]json.RawMessage{k: nil}, known); len(err) > 0 {
			errs = append(errs, err...)
			continue
		}
		errs = append(errs, fmt.Errorf("unknown key %q (known: %s)", k, strings.Join(known, ", ")))
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return errors.New(typeMessage(err))
	}
	return nil
}

// jsonKeys lists the JSON keys of the struct v points to.
func jsonKeys(v any) []string {
	t := reflect.TypeOf(v).Elem()
	var keys []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}

// typeMessage says what a JSON decoding error means for the user.
func typeMessage(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("%q must be a %s, not a JSON %s", te.Field, te.Type, te.Value)
		}
		return fmt.Sprintf("must be a %s, not a JSON %s", te.Type, te.Value)
	}
	return err.Error()
}

// Defaults fills in every key the conflist left out.
func (c *NetConf) Defaults() {
	if c.TimeoutRaw == "" {
		c.TimeoutRaw = DefaultTimeout.String()
	}
	if c.OnTimeout == "" {
		c.OnTimeout = OnTimeoutFail
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.Checks == nil {
		c.Checks = []CheckConf{{Kind: KindAddress}, {Kind: KindRoute}}
	}
	if pc, ok := presetChecks[c.Preset]; ok && !slices.ContainsFunc(c.Checks, func(cc CheckConf) bool { return cc.Preset == c.Preset }) {
		c.Checks = append(c.Checks, pc)
	}
	for i := range c.Checks {
		c.Checks[i].Defaults()
	}
	if c.Status != nil {
		c.Status.Defaults()
	}
}

// Validate returns every problem at once, each naming its key.
func (c *NetConf) Validate() error {
	var errs []error
	d, err := time.ParseDuration(c.TimeoutRaw)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf(`"timeout" %q is not a Go duration such as "10s"`, c.TimeoutRaw))
	case d <= 0 || d > MaxTimeout:
		errs = append(errs, fmt.Errorf(`"timeout" %q must be > 0 and <= 100s`, c.TimeoutRaw))
	default:
		c.Timeout = d
	}
	if c.OnTimeout != OnTimeoutFail && c.OnTimeout != OnTimeoutProceed {
		errs = append(errs, fmt.Errorf(`"onTimeout" %q must be "fail" or "proceed"`, c.OnTimeout))
	}
	if !filepath.IsAbs(c.StateDir) {
		errs = append(errs, fmt.Errorf(`"stateDir" %q must be an absolute path`, c.StateDir))
	}
	if _, ok := presetChecks[c.Preset]; c.Preset != "" && !ok {
		errs = append(errs, fmt.Errorf(`"preset" %q is unknown: use "calico", "cilium" or "ovn-kubernetes"`, c.Preset))
	}
	if c.LogFile != "" && !filepath.IsAbs(c.LogFile) {
		errs = append(errs, fmt.Errorf(`"logFile" %q must be an absolute path`, c.LogFile))
	}
	for i := range c.Checks {
		if err := c.Checks[i].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("checks[%d] (%s): %w", i, c.Checks[i].Kind, err))
		}
	}
	if c.Status != nil {
		if err := c.Status.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("status: %w", err))
		}
	}
	return errors.Join(errs...)
}
