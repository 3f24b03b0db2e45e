package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/netready/netready/pkg/endpoint"
)

// Check kinds from the contract.
const (
	KindAddress  = "address"
	KindRoute    = "route"
	KindGateway  = "gateway"
	KindIPTables = "iptables"
	KindNFTables = "nftables"
	KindFile     = "file"
	KindHTTP     = "http"
	KindOVSDB    = "ovsdb"

	PresetCalico        = "calico"
	PresetCilium        = "cilium"
	PresetOVNKubernetes = "ovn-kubernetes"
	// DefaultOVSDBSocket is Open vSwitch's database socket.
	DefaultOVSDBSocket = "/var/run/openvswitch/db.sock"
	// DefaultCiliumSocket is where the Cilium agent serves its REST API.
	DefaultCiliumSocket = "unix:///var/run/cilium/cilium.sock"
	// DefaultCalicoStatusDir is Felix's default EndpointStatusPathPrefix
	// plus its per-endpoint folder.
	DefaultCalicoStatusDir = "/var/run/calico/endpoint-status"
)

// Kinds returns the check kinds, in the contract's order. Package checks
// builds each; a test there holds the two lists equal.
func Kinds() []string {
	return []string{KindAddress, KindRoute, KindGateway, KindIPTables, KindNFTables, KindFile, KindHTTP, KindOVSDB}
}

// presetChecks is the check a top-level "preset" adds.
var presetChecks = map[string]CheckConf{
	PresetCalico:        {Kind: KindFile, Preset: PresetCalico},
	PresetCilium:        {Kind: KindHTTP, Preset: PresetCilium},
	PresetOVNKubernetes: {Kind: KindOVSDB, Preset: PresetOVNKubernetes},
}

// CheckConf is one entry of "checks". Which fields apply depends on Kind;
// Validate refuses fields that do not.
type CheckConf struct {
	Kind string `json:"kind"`

	// iptables and nftables
	Table string `json:"table,omitempty"`
	Chain string `json:"chain,omitempty"`
	Match string `json:"match,omitempty"`
	// nftables
	Family string `json:"family,omitempty"`
	Set    string `json:"set,omitempty"`
	// file; with preset "calico", Path is the endpoint-status folder.
	Path     string `json:"path,omitempty"`
	Contains string `json:"contains,omitempty"`
	Preset   string `json:"preset,omitempty"`
	// http; with preset "cilium", URL is the agent's socket.
	URL    string        `json:"url,omitempty"`
	Expect []Expectation `json:"expect,omitempty"`
	// ovsdb
	Socket string `json:"socket,omitempty"`
}

// Expectation is one condition on the JSON an http check's endpoint
// answers: the value at Path equals Equals, or, with AtLeast, the number
// at Path is >= the number at the path AtLeast names. Paths are
// dot-separated keys, or indices into arrays: "status.policy.spec.policy-revision".
type Expectation struct {
	Path    string          `json:"path"`
	Equals  json.RawMessage `json:"equals,omitempty"`
	AtLeast string          `json:"atLeast,omitempty"`
}

// UnmarshalJSON is strict, as every other part of a check is.
func (e *Expectation) UnmarshalJSON(b []byte) error {
	type plain Expectation
	return StrictUnmarshal(b, (*plain)(e))
}

// Validate checks one expectation; errors name the field.
func (e *Expectation) Validate() error {
	var errs []error
	if err := validPath(e.Path); err != nil {
		errs = append(errs, fmt.Errorf(`"path" %q: %w`, e.Path, err))
	}
	switch {
	case len(e.Equals) > 0 && e.AtLeast != "":
		errs = append(errs, errors.New(`give either "equals" or "atLeast", not both`))
	case len(e.Equals) == 0 && e.AtLeast == "":
		errs = append(errs, errors.New(`"equals" or "atLeast" is required`))
	case e.AtLeast != "":
		if err := validPath(e.AtLeast); err != nil {
			errs = append(errs, fmt.Errorf(`"atLeast" %q: %w`, e.AtLeast, err))
		}
	}
	return errors.Join(errs...)
}

func validPath(p string) error {
	if p == "" {
		return errors.New("is empty")
	}
	for _, seg := range strings.Split(p, ".") {
		if seg == "" {
			return errors.New("has an empty segment")
		}
	}
	return nil
}

// Placeholders are the values a check's strings may use, e.g. {{.IP}}.
type Placeholders struct {
	IP, ContainerID, IfName, Network, PodNamespace, PodName, PodUID string
}

// Defaults fills in per-kind defaults.
func (c *CheckConf) Defaults() {
	switch c.Kind {
	case KindIPTables:
		if c.Table == "" {
			c.Table = "filter"
		}
	case KindNFTables:
		if c.Family == "" {
			c.Family = "inet"
		}
	case KindFile:
		if c.Preset == PresetCalico && c.Path == "" {
			c.Path = DefaultCalicoStatusDir
		}
	case KindHTTP:
		if c.Preset == PresetCilium && c.URL == "" {
			c.URL = DefaultCiliumSocket
		}
	case KindOVSDB:
		if c.Socket == "" {
			c.Socket = DefaultOVSDBSocket
		}
	}
}

var iptablesTables = map[string]bool{"filter": true, "nat": true, "mangle": true, "raw": true, "security": true}

var nftFamilies = map[string]bool{"ip": true, "ip6": true, "inet": true, "arp": true, "bridge": true, "netdev": true}

// Validate checks one entry; errors name the field.
func (c *CheckConf) Validate() error {
	var errs []error
	allowed := map[string]bool{}
	need := func(field, value string) {
		allowed[field] = true
		if value == "" {
			errs = append(errs, fmt.Errorf("%q is required", field))
		}
	}
	allow := func(fields ...string) {
		for _, f := range fields {
			allowed[f] = true
		}
	}
	switch c.Kind {
	case KindAddress, KindRoute, KindGateway:
	case KindIPTables:
		need("table", c.Table)
		if c.Table != "" && !iptablesTables[c.Table] {
			errs = append(errs, fmt.Errorf(`"table" %q must be one of filter, nat, mangle, raw, security`, c.Table))
		}
		need("chain", c.Chain)
		need("match", c.Match)
	case KindNFTables:
		need("table", c.Table)
		allow("family", "set", "chain", "match")
		if !nftFamilies[c.Family] {
			errs = append(errs, fmt.Errorf(`"family" %q must be one of ip, ip6, inet, arp, bridge, netdev`, c.Family))
		}
		switch {
		case c.Set != "" && (c.Chain != "" || c.Match != ""):
			errs = append(errs, errors.New(`give either "set" or "chain" with "match", not both`))
		case c.Set == "" && (c.Chain == "" || c.Match == ""):
			errs = append(errs, errors.New(`"set", or "chain" with "match", is required`))
		}
	case KindFile:
		allow("path", "contains", "preset")
		switch c.Preset {
		case "":
			if c.Path == "" {
				errs = append(errs, errors.New(`"path" (or "preset": "calico") is required`))
			}
		case PresetCalico:
			if c.Contains != "" {
				errs = append(errs, errors.New(`"contains" does not apply to "preset": "calico"`))
			}
		default:
			errs = append(errs, fmt.Errorf(`"preset" %q is unknown for kind "file"; the only one is "calico"`, c.Preset))
		}
		if c.Path != "" && !filepath.IsAbs(strings.SplitN(c.Path, "{{", 2)[0]) {
			errs = append(errs, fmt.Errorf(`"path" %q must be absolute`, c.Path))
		}
	case KindHTTP:
		need("url", c.URL)
		allow("path", "preset")
		switch c.Preset {
		case "":
		case PresetCilium:
			if c.Path != "" || len(c.Expect) > 0 {
				errs = append(errs, errors.New(`"path" and "expect" do not apply to "preset": "cilium": it asks for the pod's endpoint and knows what ready means`))
			}
			if c.URL != "" && !strings.HasPrefix(c.URL, "unix://") {
				errs = append(errs, fmt.Errorf(`"url" %q: the Cilium agent serves its API on a unix:// socket`, c.URL))
			}
		default:
			errs = append(errs, fmt.Errorf(`"preset" %q is unknown for kind "http"; the only one is "cilium"`, c.Preset))
		}
		if c.URL != "" {
			if err := validateHTTPURL(c.URL, c.Path); err != nil {
				errs = append(errs, err)
			}
		}
		for i := range c.Expect {
			if err := c.Expect[i].Validate(); err != nil {
				errs = append(errs, fmt.Errorf("expect[%d]: %w", i, err))
			}
		}
	case KindOVSDB:
		allow("preset", "socket")
		if c.Preset != PresetOVNKubernetes {
			errs = append(errs, fmt.Errorf(`"preset" %q: kind "ovsdb" needs "preset": "ovn-kubernetes"`, c.Preset))
		}
		if c.Socket != "" && !filepath.IsAbs(c.Socket) {
			errs = append(errs, fmt.Errorf(`"socket" %q must be an absolute path`, c.Socket))
		}
	case "":
		return errors.New(`"kind" is required`)
	default:
		return fmt.Errorf(`unknown check "kind" %q: use one of %s`, c.Kind, strings.Join(Kinds(), ", "))
	}
	for field, value := range c.fields() {
		if value != "" && !allowed[field] {
			errs = append(errs, fmt.Errorf("%q does not apply to kind %q", field, c.Kind))
		}
	}
	if len(c.Expect) > 0 && c.Kind != KindHTTP {
		errs = append(errs, fmt.Errorf(`"expect" does not apply to kind %q`, c.Kind))
	}
	for field, value := range c.fields() {
		if _, err := Expand(value, Placeholders{}); err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", field, err))
		}
	}
	return errors.Join(errs...)
}

// stringField is one string of a check, by its JSON name.
type stringField struct {
	name  string
	value *string
}

// stringFields are the check's strings: what "does not apply" and
// placeholders speak of.
func (c *CheckConf) stringFields() []stringField {
	return []stringField{
		{"table", &c.Table}, {"chain", &c.Chain}, {"match", &c.Match}, {"family", &c.Family}, {"set", &c.Set},
		{"path", &c.Path}, {"contains", &c.Contains}, {"preset", &c.Preset}, {"url", &c.URL}, {"socket", &c.Socket},
	}
}

func (c *CheckConf) fields() map[string]string {
	m := map[string]string{}
	for _, f := range c.stringFields() {
		m[f.name] = *f.value
	}
	return m
}

// Expanded returns the check with the placeholders of every string
// filled from p.
func (c CheckConf) Expanded(p Placeholders) (CheckConf, error) {
	for _, f := range c.stringFields() {
		v, err := Expand(*f.value, p)
		if err != nil {
			return CheckConf{}, fmt.Errorf("%q: %w", f.name, err)
		}
		*f.value = v
	}
	return c, nil
}

// UsesIP reports whether any string of the check uses {{.IP}}, which makes
// the check apply once per pod IP.
func (c *CheckConf) UsesIP() bool {
	for _, f := range c.stringFields() {
		uses := false
		_, _ = expand(*f.value, func(name string) (string, bool) {
			uses = uses || name == "IP"
			return "", true
		})
		if uses {
			return true
		}
	}
	return false
}

// placeholders are the names a {{.Name}} may use, each with its value: the
// one list that expansion and its error messages both read.
var placeholders = []struct {
	name  string
	value func(*Placeholders) string
}{
	{"IP", func(p *Placeholders) string { return p.IP }},
	{"ContainerID", func(p *Placeholders) string { return p.ContainerID }},
	{"IfName", func(p *Placeholders) string { return p.IfName }},
	{"Network", func(p *Placeholders) string { return p.Network }},
	{"PodNamespace", func(p *Placeholders) string { return p.PodNamespace }},
	{"PodName", func(p *Placeholders) string { return p.PodName }},
	{"PodUID", func(p *Placeholders) string { return p.PodUID }},
}

// knownPlaceholders lists the names for error messages.
func knownPlaceholders() string {
	names := make([]string, len(placeholders))
	for i, ph := range placeholders {
		names[i] = "{{." + ph.name + "}}"
	}
	return strings.Join(names, " ")
}

// Expand fills the placeholders of s. A placeholder is {{.Name}}, with
// optional spaces inside the braces, for one of the names Placeholders
// has; anything else between {{ and }} is an error.
func Expand(s string, p Placeholders) (string, error) {
	return expand(s, p.value)
}

// value returns the placeholder called name.
func (p Placeholders) value(name string) (string, bool) {
	for _, ph := range placeholders {
		if ph.name == name {
			return ph.value(&p), true
		}
	}
	return "", false
}

// expand replaces each {{.Name}} of s with value(Name).
func expand(s string, value func(name string) (string, bool)) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	var b strings.Builder
	for {
		open := strings.Index(s, "{{")
		if open < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:open])
		rest := s[open+2:]
		end := strings.Index(rest, "}}")
		if end < 0 {
			return "", fmt.Errorf("bad placeholder: %q has no closing }} (known: %s)", s[open:], knownPlaceholders())
		}
		inner := strings.Trim(rest[:end], " \t\r\n")
		name, ok := strings.CutPrefix(inner, ".")
		v, known := value(name)
		if !ok || !known {
			return "", fmt.Errorf("bad placeholder {{%s}} (known: %s)", inner, knownPlaceholders())
		}
		b.WriteString(v)
		s = rest[end+2:]
	}
}

// validateHTTPURL checks an endpoint (package endpoint) and the "path"
// that goes with it.
func validateHTTPURL(raw, path string) error {
	e, err := endpoint.Parse(raw)
	switch {
	case errors.Is(err, endpoint.ErrNotLoopback):
		return fmt.Errorf(`"url" %q: the host must be an IP literal in 127.0.0.0/8, [::1], or exactly localhost; names are never resolved`, raw)
	case errors.Is(err, endpoint.ErrScheme):
		return fmt.Errorf(`"url" %q must start with http:// (loopback) or unix://`, raw)
	case err != nil:
		return fmt.Errorf(`"url" %w`, err)
	}
	if e.Network == "unix" {
		if path != "" && !strings.HasPrefix(path, "/") {
			return fmt.Errorf(`"path" %q must start with /`, path)
		}
	} else if path != "" {
		return fmt.Errorf(`"path" applies only to unix:// urls; put it in "url"`)
	}
	return nil
}
