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
	"github.com/containernetworking/cni/pkg/version"
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

	// Timeout is TimeoutRaw parsed.
	Timeout time.Duration `json:"-"`
}

// Parse decodes stdin, fills in defaults and validates. Errors are CNI
// errors with code 7 whose message names every bad key at once.
func Parse(stdin []byte) (*NetConf, error) {
	conf, decodeErr := decode(stdin)
	if conf == nil {
		return nil, invalid(decodeErr)
	}
	conf.Defaults()
	if err := errors.Join(decodeErr, conf.Validate()); err != nil {
		return nil, invalid(err)
	}
	return conf, nil
}

// ParsePrevResult parses prevResult, which ADD and CHECK require.
func (c *NetConf) ParsePrevResult() error {
	if c.RawPrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig,
			"netready: no prevResult: netready must be called as a chained plugin, last in a conflist", "")
	}
	if err := version.ParsePrevResult(&c.NetConf); err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("netready: cannot parse prevResult: %v", err), "")
	}
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
	conf := &NetConf{}
	var errs []error
	if err := json.Unmarshal(stdin, &conf.NetConf); err != nil {
		errs = append(errs, fmt.Errorf("cannot decode the CNI keys: %w", err))
	}
	errs = append(errs, caseTypos(top, topKeys)...)
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
	return conf, errors.Join(errs...)
}

// topKeys are netready's own top-level keys.
var topKeys = []string{"timeout", "onTimeout", "stateDir", "logFile", "checks", "status"}

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
