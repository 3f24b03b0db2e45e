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
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// Defaults from the contract.
const (
	DefaultTimeout  = 10 * time.Second
	MaxTimeout      = 5 * time.Minute
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
// errors with code 7 whose message names the bad key.
func Parse(stdin []byte) (*NetConf, error) {
	conf, err := decode(stdin)
	if err != nil {
		return nil, invalid(err)
	}
	conf.Defaults()
	if err := conf.Validate(); err != nil {
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
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	return types.NewError(types.ErrInvalidNetworkConfig, "netready: invalid configuration: "+msg, "")
}

// decode unmarshals the top level leniently (a conflist entry carries keys
// of the runtime's) but each check strictly, so that a typo in a check is an
// error rather than a silently ignored field.
func decode(stdin []byte) (*NetConf, error) {
	var top struct {
		types.NetConf
		TimeoutRaw *string           `json:"timeout"`
		OnTimeout  string            `json:"onTimeout"`
		StateDir   string            `json:"stateDir"`
		LogFile    string            `json:"logFile"`
		Checks     []json.RawMessage `json:"checks"`
		Status     json.RawMessage   `json:"status"`
	}
	if err := json.Unmarshal(stdin, &top); err != nil {
		return nil, fmt.Errorf("cannot decode JSON: %w", err)
	}
	conf := &NetConf{NetConf: top.NetConf, OnTimeout: top.OnTimeout, StateDir: top.StateDir, LogFile: top.LogFile}
	if top.TimeoutRaw != nil {
		conf.TimeoutRaw = *top.TimeoutRaw
		if conf.TimeoutRaw == "" {
			return nil, errors.New(`"timeout" is empty: give a Go duration such as "10s"`)
		}
	}

	var errs []error
	if top.Checks != nil {
		conf.Checks = make([]CheckConf, 0, len(top.Checks))
	}
	for i, raw := range top.Checks {
		var cc CheckConf
		if err := strictUnmarshal(raw, &cc); err != nil {
			errs = append(errs, fmt.Errorf("checks[%d]: %w", i, err))
			continue
		}
		conf.Checks = append(conf.Checks, cc)
	}
	if len(top.Status) > 0 && !bytes.Equal(bytes.TrimSpace(top.Status), []byte("null")) {
		var sc StatusConf
		if err := strictUnmarshal(top.Status, &sc); err != nil {
			errs = append(errs, fmt.Errorf("status: %w", err))
		} else {
			conf.Status = &sc
		}
	}
	return conf, errors.Join(errs...)
}

func strictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	return nil
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
		errs = append(errs, fmt.Errorf(`"timeout" %q must be > 0 and <= %s`, c.TimeoutRaw, "5m"))
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
