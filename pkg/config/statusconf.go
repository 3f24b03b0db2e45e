package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Agent kinds of the status block.
const (
	AgentHTTP = "http"
	AgentFile = "file"
)

// What a short pool does (status.poolAction).
const (
	// PoolTaint leaves STATUS green; the sidecar taints the node so that
	// the scheduler stops sending pods, and nothing is evicted.
	PoolTaint = "taint"
	// PoolNotReady fails STATUS, which turns the node NotReady.
	PoolNotReady = "notready"
)

// Pool sources: the "type" of a status.ipam object.
const (
	// IPAMHostLocal is host-local's own ipam object: its allocation folder.
	IPAMHostLocal = "host-local"
	// IPAMCilium is the Cilium agent's count (GET /v1/healthz on its socket).
	IPAMCilium = "cilium"
	// IPAMAWS is the AWS VPC CNI's ipamd (its introspection and metrics).
	IPAMAWS = "aws-vpc-cni"
	// IPAMCalico and IPAMOVN are counted by the sidecar from the API
	// server; STATUS reads the sidecar's verdict.
	IPAMCalico = "calico-ipam"
	IPAMOVN    = "ovn-kubernetes"
)

// Where ipamd is read when the ipam object does not say (the Cilium
// agent: DefaultCiliumSocket).
const (
	DefaultAWSURL     = "http://127.0.0.1:61679"
	DefaultAWSMetrics = "http://127.0.0.1:61678/metrics"
)

// CiliumIPAM is status.ipam {"type": "cilium"}.
type CiliumIPAM struct {
	Type   string `json:"type"`
	Socket string `json:"socket,omitempty"`
}

// AWSIPAM is status.ipam {"type": "aws-vpc-cni"}: URL is ipamd's
// introspection address, Metrics its metrics endpoint.
type AWSIPAM struct {
	Type    string `json:"type"`
	URL     string `json:"url,omitempty"`
	Metrics string `json:"metrics,omitempty"`
}

// CalicoIPAM is status.ipam {"type": "calico-ipam"}: the keys of Calico's
// own CNI ipam object that say which families and pools it assigns from,
// with Calico's types (strings, lists of pool names or CIDRs). Any string
// is taken, as Calico takes it: assign_ipv4 is off only for "false",
// assign_ipv6 on only for "true".
type CalicoIPAM struct {
	Type       string   `json:"type"`
	AssignIPv4 *string  `json:"assign_ipv4,omitempty"`
	AssignIPv6 *string  `json:"assign_ipv6,omitempty"`
	IPv4Pools  []string `json:"ipv4_pools,omitempty"`
	IPv6Pools  []string `json:"ipv6_pools,omitempty"`
}

// hostLocalKeys are the keys of host-local's ipam object: its IPAMConfig
// and the fields of the older single range at its top.
var hostLocalKeys = []string{"type", "name", "ranges", "subnet", "rangeStart", "rangeEnd", "gateway", "dataDir", "routes", "resolvConf"}

// validateHostLocal refuses a host-local object that names no range, which
// STATUS could never count, and keys that look like a typo of host-local's
// own: host-local would ignore them, and a misspelt dataDir would count an
// empty folder. Other keys are taken, as host-local takes them; the ranges
// themselves are read by the pool, as host-local reads them.
func validateHostLocal(obj map[string]json.RawMessage) error {
	var errs []error
	for k := range obj {
		// Go's JSON, host-local's as the pool's, takes a key in any case.
		if slices.ContainsFunc(hostLocalKeys, func(w string) bool { return strings.EqualFold(k, w) }) {
			continue
		}
		if want, ok := closestKey(k, hostLocalKeys); ok {
			errs = append(errs, fmt.Errorf("unknown key %q: did you mean %q?", k, want))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	if !hasRanges(obj) {
		errs = append([]error{errors.New(`"ranges" is required: the range sets host-local allocates from, as in the chain's host-local, such as [[{"subnet":"10.1.0.0/24"}]] (or the older single "subnet")`)}, errs...)
	}
	return errors.Join(errs...)
}

// hasRanges reports whether a host-local object names a range: a
// non-empty "ranges" list, or the older single "subnet".
func hasRanges(obj map[string]json.RawMessage) bool {
	var ranges []json.RawMessage
	var subnet string
	for k, v := range obj {
		switch {
		case strings.EqualFold(k, "ranges"):
			if json.Unmarshal(v, &ranges) != nil || len(ranges) > 0 {
				return true // a wrong type is the pool's to name
			}
		case strings.EqualFold(k, "subnet"):
			if json.Unmarshal(v, &subnet) != nil || subnet != "" {
				return true
			}
		}
	}
	return false
}

// StatusConf is the "status" block: what STATUS verifies besides the
// plugin's own health.
type StatusConf struct {
	// IPAM is an ipam object whose "type" names the pool source (host-local's
	// own object, or CiliumIPAM, AWSIPAM), or the string "auto".
	IPAM    json.RawMessage `json:"ipam,omitempty"`
	MinFree *int            `json:"minFree,omitempty"`
	// PoolAction is PoolTaint or PoolNotReady.
	PoolAction string      `json:"poolAction,omitempty"`
	ConfDir    string      `json:"confDir,omitempty"`
	Agents     []AgentConf `json:"agents,omitempty"`
	// FailAfter is how long an agent must fail without a break before it
	// fails STATUS: an agent's own rolling update must not turn the node
	// NotReady. "0s" fails STATUS at the first miss.
	FailAfter string `json:"failAfter,omitempty"`

	// FailAfterDuration is FailAfter parsed.
	FailAfterDuration time.Duration `json:"-"`
}

// DefaultFailAfter is status.failAfter's default: longer than a CNI
// agent's rolling update (10-15 s), well under kubelet's eviction delays.
const DefaultFailAfter = 30 * time.Second

// maxFailAfter bounds status.failAfter: beyond it, a dead agent would go
// unreported for longer than an operator would wait for a page.
const maxFailAfter = time.Hour

// AgentConf is one agent whose health STATUS requires.
type AgentConf struct {
	Kind   string `json:"kind"`
	URL    string `json:"url,omitempty"`
	Path   string `json:"path,omitempty"`
	MaxAge string `json:"maxAge,omitempty"`
	// Expect applies to kind http, as for http checks.
	Expect []Expectation `json:"expect,omitempty"`

	// MaxAgeDuration is MaxAge parsed.
	MaxAgeDuration time.Duration `json:"-"`
}

// IPAMAuto reports whether ipam is "auto".
func (s *StatusConf) IPAMAuto() bool {
	return bytes.Equal(bytes.TrimSpace(s.IPAM), []byte(`"auto"`))
}

// Defaults fills in minFree, poolAction and confDir.
func (s *StatusConf) Defaults() {
	if s.PoolAction == "" {
		s.PoolAction = PoolTaint
	}
	if s.MinFree == nil {
		one := 1
		s.MinFree = &one
	}
	if s.ConfDir == "" {
		s.ConfDir = DefaultConfDir
	}
	if s.FailAfter == "" {
		s.FailAfterDuration = DefaultFailAfter
	}
}

// Validate checks the block; errors name the key.
func (s *StatusConf) Validate() error {
	var errs []error
	if len(s.IPAM) > 0 && !s.IPAMAuto() {
		if err := validateIPAM(s.IPAM); err != nil {
			errs = append(errs, err)
		}
	}
	if *s.MinFree < 0 {
		errs = append(errs, fmt.Errorf(`"minFree" %d must be >= 0`, *s.MinFree))
	}
	if s.PoolAction != PoolTaint && s.PoolAction != PoolNotReady {
		errs = append(errs, fmt.Errorf(`"poolAction" %q must be %q (the sidecar taints the node) or %q (STATUS fails)`, s.PoolAction, PoolTaint, PoolNotReady))
	}
	if !filepath.IsAbs(s.ConfDir) {
		errs = append(errs, fmt.Errorf(`"confDir" %q must be an absolute path`, s.ConfDir))
	}
	if s.FailAfter != "" {
		d, err := time.ParseDuration(s.FailAfter)
		if err != nil || d < 0 || d > maxFailAfter {
			errs = append(errs, fmt.Errorf(`"failAfter" %q must be a Go duration between 0s and %s, such as "30s"`, s.FailAfter, maxFailAfter))
		} else {
			s.FailAfterDuration = d
		}
	}
	for i := range s.Agents {
		if err := s.Agents[i].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("agents[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Validate checks one agent entry.
func (a *AgentConf) Validate() error {
	switch a.Kind {
	case AgentHTTP:
		if a.URL == "" {
			return errors.New(`"url" is required`)
		}
		if a.MaxAge != "" {
			return errors.New(`"maxAge" applies only to kind "file"`)
		}
		errs := []error{validateHTTPURL(a.URL, a.Path)}
		for i := range a.Expect {
			if err := a.Expect[i].Validate(); err != nil {
				errs = append(errs, fmt.Errorf("expect[%d]: %w", i, err))
			}
		}
		return errors.Join(errs...)
	case AgentFile:
		if a.URL != "" || len(a.Expect) > 0 {
			return errors.New(`"url" and "expect" apply only to kind "http"`)
		}
		if !filepath.IsAbs(a.Path) {
			return fmt.Errorf(`"path" %q must be an absolute path`, a.Path)
		}
		if a.MaxAge == "" {
			return nil
		}
		d, err := time.ParseDuration(a.MaxAge)
		if err != nil || d <= 0 {
			return fmt.Errorf(`"maxAge" %q must be a positive Go duration such as "30s"`, a.MaxAge)
		}
		a.MaxAgeDuration = d
		return nil
	case "":
		return errors.New(`"kind" is required`)
	default:
		return fmt.Errorf(`unknown agent "kind" %q: use http or file`, a.Kind)
	}
}

// IPAMType is the "type" of the status.ipam object; "" for "auto", none,
// or anything but an object with a string type.
func (s *StatusConf) IPAMType() string {
	var obj struct {
		Type string `json:"type"`
	}
	if s.IPAMAuto() || json.Unmarshal(s.IPAM, &obj) != nil {
		return ""
	}
	return obj.Type
}

// validateIPAM checks status.ipam by its type. host-local's object is
// read by the pool itself, as host-local reads it; the agent sources'
// endpoints follow the rules of http checks: loopback or a unix socket,
// never a name to resolve.
func validateIPAM(raw json.RawMessage) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return fmt.Errorf(`"ipam" must be "auto" or an object whose "type" is %q, %q or %q`, IPAMHostLocal, IPAMCilium, IPAMAWS)
	}
	var typ string
	if t, ok := obj["type"]; !ok || json.Unmarshal(t, &typ) != nil {
		return fmt.Errorf(`"ipam": "type" is required and must be a string: %q, %q or %q`, IPAMHostLocal, IPAMCilium, IPAMAWS)
	}
	switch typ {
	case IPAMHostLocal:
		if err := validateHostLocal(obj); err != nil {
			return fmt.Errorf(`"ipam" (type %q): %w`, typ, err)
		}
		return nil
	case IPAMCilium:
		var c CiliumIPAM
		if err := StrictUnmarshal(raw, &c); err != nil {
			return fmt.Errorf(`"ipam" (type %q): %w`, typ, err)
		}
		if c.Socket == "" {
			return nil
		}
		if !strings.HasPrefix(c.Socket, "unix://") {
			return fmt.Errorf(`"ipam" (type %q): "socket" %q must be unix:///absolute/path.sock: the agent serves its API only on a unix socket`, typ, c.Socket)
		}
		if err := validateHTTPURL(c.Socket, ""); err != nil {
			return fmt.Errorf(`"ipam" (type %q): "socket": %w`, typ, err)
		}
		return nil
	case IPAMAWS:
		var a AWSIPAM
		if err := StrictUnmarshal(raw, &a); err != nil {
			return fmt.Errorf(`"ipam" (type %q): %w`, typ, err)
		}
		var errs []error
		if a.URL != "" {
			if err := validateHTTPURL(a.URL, ""); err != nil {
				errs = append(errs, err)
			} else if u, _ := url.Parse(a.URL); u.Scheme == "http" && u.Path != "" && u.Path != "/" {
				errs = append(errs, fmt.Errorf(`"url" %q is ipamd's introspection address, without a path, such as %q`, a.URL, DefaultAWSURL))
			}
		}
		if a.Metrics != "" {
			if err := validateHTTPURL(a.Metrics, ""); err != nil {
				errs = append(errs, fmt.Errorf(`"metrics": %w`, err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf(`"ipam" (type %q): %w`, typ, err)
		}
		return nil
	case IPAMCalico:
		var c CalicoIPAM
		if err := StrictUnmarshal(raw, &c); err != nil {
			return fmt.Errorf(`"ipam" (type %q): %w`, typ, err)
		}
		return nil
	case IPAMOVN:
		var o struct {
			Type string `json:"type"`
		}
		if err := StrictUnmarshal(raw, &o); err != nil {
			return fmt.Errorf(`"ipam" (type %q): %w`, typ, err)
		}
		return nil
	default:
		return fmt.Errorf(`"ipam": only "type": %q, %q, %q, %q or %q can be counted, got %q`, IPAMHostLocal, IPAMCilium, IPAMAWS, IPAMCalico, IPAMOVN, typ)
	}
}
