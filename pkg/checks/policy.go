package checks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/google/nftables"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/httpget"
	"github.com/netready/netready/pkg/nftrule"
	"github.com/netready/netready/pkg/watch"
)

// buildPolicy makes the checks of agent-programmed state.
func buildPolicy(cc *config.CheckConf, att *attachment.Attachment, env *Env) ([]Check, error) {
	switch cc.Kind {
	case config.KindIPTables:
		return perIP(cc, att, func(p config.Placeholders) (Check, error) {
			match := cc.Match
			if err := expandAll(p, &match); err != nil {
				return nil, err
			}
			return &iptablesCheck{env: env, proto: iptablesFamily(p.IP, att), table: cc.Table, chain: cc.Chain, match: match,
				rule: nftrule.IPTables(match)}, nil
		})
	case config.KindNFTables:
		return buildNFTables(cc, att, env)
	case config.KindFile:
		if cc.Preset == config.PresetCalico {
			c, err := calicoCheck(cc.Path, att)
			if err != nil {
				return nil, err
			}
			return []Check{c}, nil
		}
		return perIP(cc, att, func(p config.Placeholders) (Check, error) {
			path, contains := cc.Path, cc.Contains
			if err := expandAll(p, &path, &contains); err != nil {
				return nil, err
			}
			if !filepath.IsAbs(path) {
				return nil, never("path %q is not absolute once expanded", path)
			}
			return &fileCheck{kind: config.KindFile, path: filepath.Clean(path), contains: contains}, nil
		})
	case config.KindOVSDB:
		return []Check{newOVNCheck(cc.Socket, att)}, nil
	case config.KindHTTP:
		if cc.Preset == config.PresetCilium {
			c, err := ciliumCheck(cc.URL, att)
			if err != nil {
				return nil, err
			}
			return []Check{c}, nil
		}
		return perIP(cc, att, func(p config.Placeholders) (Check, error) {
			raw, path := cc.URL, cc.Path
			if err := expandAll(p, &raw, &path); err != nil {
				return nil, err
			}
			return NewHTTPCheck(raw, path, ExpectJudge(cc.Expect))
		})
	}
	return nil, fmt.Errorf("unknown check kind %q", cc.Kind)
}

// expandAll fills the placeholders of each string in place.
func expandAll(p config.Placeholders, fields ...*string) error {
	for _, f := range fields {
		v, err := config.Expand(*f, p)
		if err != nil {
			return err
		}
		*f = v
	}
	return nil
}

// iptablesFamily: ip6tables for an IPv6 pod IP; for a check not made per
// IP, ip6tables only when the pod has IPv6 addresses and no IPv4 one.
func iptablesFamily(podIP string, att *attachment.Attachment) iptables.Protocol {
	if ip := net.ParseIP(podIP); ip != nil {
		if ip.To4() == nil {
			return iptables.ProtocolIPv6
		}
		return iptables.ProtocolIPv4
	}
	for _, ip := range att.IPs {
		if ip.Address.IP.To4() != nil {
			return iptables.ProtocolIPv4
		}
	}
	if len(att.IPs) > 0 {
		return iptables.ProtocolIPv6
	}
	return iptables.ProtocolIPv4
}

// iptablesCheck: a rule of table/chain contains match at token boundaries.
type iptablesCheck struct {
	env                 *Env
	proto               iptables.Protocol
	table, chain, match string
	// rule is match as iptables-nft's rules are read through netlink.
	rule nftrule.Match
}

func (c *iptablesCheck) Kind() string { return config.KindIPTables }

func (c *iptablesCheck) Target() string {
	cmd := "iptables"
	if c.proto == iptables.ProtocolIPv6 {
		cmd = "ip6tables"
	}
	return fmt.Sprintf("%s %s/%s contains %q", cmd, c.table, c.chain, c.match)
}

// Sources: with the nf_tables backend, iptables rules are nftables objects
// and their changes arrive as nftables notifications, filtered to new rules
// of the check's chain; the legacy backend has no events, so the check is
// polled.
func (c *iptablesCheck) Sources() []watch.Source {
	if c.env.iptablesIsNFT() {
		return []watch.Source{ruleSource(c.nftFamily(), c.table, c.chain, c.rule)}
	}
	return nil
}

// nftFamily is the nftables family that iptables-nft keeps the rules in.
func (c *iptablesCheck) nftFamily() nftables.TableFamily {
	if c.proto == iptables.ProtocolIPv6 {
		return nftables.TableFamilyIPv6
	}
	return nftables.TableFamilyIPv4
}

// Probe: with iptables-nft and an address match ("-s 10.1.0.5/32"), the
// chain's rules are read through nftables netlink; any other match, or
// legacy iptables, runs iptables.
func (c *iptablesCheck) Probe(ctx context.Context) (bool, string, error) {
	if c.rule.Decidable() && c.env.iptablesIsNFT() {
		ok, why := c.env.chainHolds(c.nftFamily(), c.table, c.chain, c.rule)
		return ok, why, nil
	}
	ipt, err := c.env.IPTables(ctx, c.proto)
	if err != nil {
		return false, err.Error(), nil
	}
	rules, err := ipt.List(c.table, c.chain)
	if err != nil {
		// iptables-nft 1.8.9 calls a missing chain "incompatible", which
		// go-iptables does not read as "not exist"; ask, on this path only.
		var e *iptables.Error
		if errors.As(err, &e) && e.IsNotExist() {
			return false, fmt.Sprintf("chain %s/%s does not exist (yet)", c.table, c.chain), nil
		}
		if exists, cerr := ipt.ChainExists(c.table, c.chain); cerr == nil && !exists {
			return false, fmt.Sprintf("chain %s/%s does not exist (yet)", c.table, c.chain), nil
		}
		return false, fmt.Sprintf("cannot list %s/%s: %v", c.table, c.chain, strings.TrimSpace(err.Error())), nil
	}
	for _, r := range rules {
		if nftrule.ContainsToken(r, c.match) {
			return true, "", nil
		}
	}
	return false, "no rule matches yet", nil
}

// fileCheck: path exists and, if set, contains the text.
type fileCheck struct {
	kind     string
	path     string
	contains string
	// noFolder, when set, is why a missing parent folder means the agent
	// is not set up to write the file at all (a preset's prerequisite).
	noFolder string
}

// maxFileRead bounds how much of a status file is read.
const maxFileRead = 1 << 20

func (c *fileCheck) Kind() string { return c.kind }

func (c *fileCheck) Target() string {
	if c.contains != "" {
		return fmt.Sprintf("%s contains %q", c.path, c.contains)
	}
	return c.path
}

func (c *fileCheck) Sources() []watch.Source {
	return []watch.Source{{Kind: watch.Dir, Path: filepath.Dir(c.path), Name: filepath.Base(c.path)}}
}

func (c *fileCheck) Probe(context.Context) (bool, string, error) {
	f, err := os.Open(c.path)
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Dir(c.path)); c.noFolder != "" && errors.Is(err, os.ErrNotExist) {
			return false, c.noFolder, nil
		}
		return false, "file does not exist (yet)", nil
	}
	if err != nil {
		return false, err.Error(), nil
	}
	defer f.Close()
	if c.contains == "" {
		return true, "", nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileRead))
	if err != nil {
		return false, err.Error(), nil
	}
	if !bytes.Contains(data, []byte(c.contains)) {
		return false, "file does not contain the text yet", nil
	}
	return true, "", nil
}

// calicoCheck waits for the file that Calico's Felix writes into its
// endpoint-status folder once a workload endpoint's dataplane (routes and
// policy) is programmed; Calico's own CNI plugin waits for the same file
// when policy_setup_timeout_seconds is set (Calico 3.28+).
//
// Name, from projectcalico/calico:
//   - libcalico-go/lib/names/workloadendpointstatus.go,
//     WorkloadEndpointKeyToStatusFilename: the orchestrator ID, workload ID
//     and endpoint ID, each url.PathEscape'd, joined by single spaces;
//   - cni-plugin/internal/pkg/utils/utils.go, GetIdentifiers: for a pod
//     (K8S_POD_NAMESPACE and K8S_POD_NAME set) the orchestrator is "k8s",
//     the workload "<namespace>/<pod>", and the endpoint ID is CNI_IFNAME;
//   - cni-plugin/pkg/wait (ForEndpointReadyWithTimeout): the plugin waits
//     until the file exists in endpoint_status_dir, by default
//     /var/run/calico/endpoint-status.
func calicoCheck(dir string, att *attachment.Attachment) (Check, error) {
	if att.Pod.Namespace == "" || att.Pod.Name == "" {
		return nil, never(`preset "calico" needs K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS`)
	}
	return &fileCheck{kind: config.KindFile, path: filepath.Join(dir, CalicoStatusFileName(att.Pod.Namespace, att.Pod.Name, att.IfName)),
		noFolder: CalicoNotWriting(dir)}, nil
}

// CalicoNotWriting says why Felix writes no endpoint status into dir: it
// writes it only with endpointStatusPathPrefix set, which is empty by
// default (the Tigera operator sets it only with
// linuxPolicySetupTimeoutSeconds > 0).
func CalicoNotWriting(dir string) string {
	return fmt.Sprintf("calico preset: %s does not exist; set endpointStatusPathPrefix in FelixConfiguration (to %s)", dir, filepath.Dir(dir))
}

// CalicoStatusFileName is Felix's endpoint-status file name for a pod.
func CalicoStatusFileName(namespace, pod, ifName string) string {
	return url.PathEscape("k8s") + " " + url.PathEscape(namespace+"/"+pod) + " " + url.PathEscape(ifName)
}

// httpCheck: a loopback or unix-socket endpoint answers 2xx, and, with a
// judge, its JSON answer says ready.
type httpCheck struct {
	client *httpget.Client
	host   string // the Host header
	path   string // the request target: path and query
	target string // what messages show
	judge  Judge
}

// Judge reads an endpoint's decoded JSON answer: ready, or why not.
type Judge func(doc any) (bool, string)

// maxHTTPBody bounds how much of an answer is read.
const maxHTTPBody = 1 << 20

// httpRequestTimeout caps one request, so that an endpoint that hangs once
// is asked again before the deadline.
const httpRequestTimeout = time.Second

// NewHTTPCheck checks that a loopback http:// or unix:// endpoint answers
// 2xx and, if judge is not nil, that judge finds its JSON answer ready. A
// 404 is "not yet". STATUS uses it for agents too.
func NewHTTPCheck(raw, path string, judge Judge) (Check, error) {
	return newHTTPCheck(raw, path, "", judge)
}

// newHTTPCheck is NewHTTPCheck with the target messages show; "" means
// the URL. Never a proxy, never DNS, never a redirect: only the loopback
// address or the socket is dialled.
func newHTTPCheck(raw, path, target string, judge Judge) (*httpCheck, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, never("url %q: %v", raw, err)
	}
	dialer := &net.Dialer{}
	c := &httpCheck{target: target, judge: judge}
	switch u.Scheme {
	case "unix":
		sock := u.Path
		c.client = &httpget.Client{Dial: func(ctx context.Context) (net.Conn, error) { return dialer.DialContext(ctx, "unix", sock) }}
		if path == "" {
			path = "/"
		}
		c.host, c.path = "localhost", path
		if c.target == "" {
			c.target = raw + " " + path
		}
	case "http":
		host := u.Hostname()
		if !config.IsLoopbackHost(host) {
			return nil, never("url %q is not an IP literal on loopback", raw)
		}
		if host == "localhost" {
			host = "127.0.0.1"
		}
		port := u.Port()
		if port == "" {
			port = "80"
		}
		addr := net.JoinHostPort(host, port)
		c.client = &httpget.Client{Dial: func(ctx context.Context) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", addr) }}
		c.host, c.path = u.Host, u.RequestURI()
		if c.target == "" {
			c.target = raw
		}
	default:
		return nil, never("url %q: scheme must be http or unix", raw)
	}
	return c, nil
}

func (c *httpCheck) Kind() string            { return config.KindHTTP }
func (c *httpCheck) Target() string          { return c.target }
func (c *httpCheck) Sources() []watch.Source { return nil }

func (c *httpCheck) Probe(ctx context.Context) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, httpRequestTimeout)
	defer cancel()
	// Polls reuse one connection while the endpoint keeps it open.
	resp, err := c.client.Get(ctx, c.host, c.path, c.judge != nil, maxHTTPBody)
	switch {
	case err != nil:
		return false, fmt.Sprintf("no answer: %v", err), nil
	case resp.StatusCode == 404:
		return false, "not there yet (404)", nil
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return false, fmt.Sprintf("answered %s", resp.Status), nil
	case c.judge == nil:
		return true, "", nil
	case len(resp.Body) > maxHTTPBody:
		return false, fmt.Sprintf("the answer is larger than %d bytes", maxHTTPBody), nil
	}
	var doc any
	if err := json.Unmarshal(resp.Body, &doc); err != nil {
		return false, fmt.Sprintf("the answer is not JSON: %v", err), nil
	}
	ready, why := c.judge(doc)
	return ready, why, nil
}
