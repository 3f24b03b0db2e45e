// Package checks owns what "programmed" means: one Check per configured
// kind and target, each able to probe the kernel or an agent once and to
// name the events that may change its answer.
package checks

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/google/nftables"
	rawnl "github.com/mdlayher/netlink"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/watch"
)

// Check is one condition for one target.
type Check interface {
	// Kind is the configured kind, e.g. "route".
	Kind() string
	// Target names what is checked, e.g. the pod IP "10.1.0.5".
	Target() string
	// Probe looks once. It returns ready, or why not. An error wrapping
	// ErrNever means the check can never succeed; any other error is
	// transient and the probe is repeated.
	Probe(ctx context.Context) (ready bool, why string, err error)
	// Sources are the event streams whose events may change the answer. A
	// check with none is polled.
	Sources() []watch.Source
}

// KernelOnly reports whether c's probe asks only the kernel (netlink, a local
// file), never an agent or a child process, so that it returns at once and
// cannot hang.
func KernelOnly(c Check) bool {
	switch c.(type) {
	case *addressCheck, *routeCheck, *gatewayCheck, *nftSetCheck, *nftRuleCheck, *fileCheck, *noIPCheck:
		return true
	}
	return false
}

// ErrNever marks a check that can never succeed, e.g. its netns is gone.
var ErrNever = errors.New("can never succeed")

// ErrNetnsGone marks, beside ErrNever, a pod netns that is gone or never
// was: the one "never" that fails ADD whatever onTimeout says, as there is
// no pod left to start.
var ErrNetnsGone = errors.New("the pod netns is gone")

func netnsGone(format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s", ErrNever, ErrNetnsGone, fmt.Sprintf(format, args...))
}

func never(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNever, fmt.Sprintf(format, args...))
}

// Describe names a check for messages: "route 10.1.0.5".
func Describe(c Check) string {
	return c.Kind() + " " + c.Target()
}

// Env holds what the checks of one attachment share: netlink handles are
// opened once, lazily, and closed by Close.
type Env struct {
	NetNS string

	mu     sync.Mutex
	pod    *netlinksafe.Handle
	podErr error
	ipt    map[iptables.Protocol]*iptables.IPTables

	nftOnce sync.Once
	isNFT   bool

	// nft is one pair of nftables connections for every probe, opened
	// lazily: a probe then costs its requests, not sockets of its own.
	nftMu sync.Mutex
	nft   *nftConns
}

// nftConns are google/nftables' connection, which reads objects, and a raw
// one for the element lookup it has no call for.
type nftConns struct {
	lib *nftables.Conn
	raw *rawnl.Conn
}

func (c *nftConns) close() {
	c.lib.CloseLasting()
	c.raw.Close()
}

// NewEnv returns an Env for a pod whose netns is at nsPath.
func NewEnv(nsPath string) *Env {
	return &Env{NetNS: nsPath}
}

// PodHandle returns a netlink handle inside the pod's netns. Only a netns
// that is gone is permanent (and remembered); any other failure, such as
// running out of file descriptors, is retried by the next probe.
func (e *Env) PodHandle() (*netlinksafe.Handle, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pod != nil || e.podErr != nil {
		return e.pod, e.podErr
	}
	if e.NetNS == "" {
		e.podErr = netnsGone("no pod netns (CNI_NETNS is empty)")
		return nil, e.podErr
	}
	nsh, err := netns.GetFromPath(e.NetNS)
	if errors.Is(err, unix.ENOENT) {
		e.podErr = netnsGone("pod netns %s: %v", e.NetNS, err)
		return nil, e.podErr
	}
	if err != nil {
		return nil, fmt.Errorf("open pod netns %s: %w", e.NetNS, err)
	}
	defer nsh.Close()
	// Only rtnetlink: each family costs a socket opened from inside the netns.
	h, err := netlinksafe.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	if errors.Is(err, unix.EINVAL) {
		// setns refuses a file that is not a netns: its mount is gone.
		e.podErr = netnsGone("%s is no longer a network namespace: %v", e.NetNS, err)
		return nil, e.podErr
	}
	if err != nil {
		return nil, fmt.Errorf("netlink in pod netns %s: %w", e.NetNS, err)
	}
	e.pod = &h
	return e.pod, nil
}

// IPTables returns an iptables (or ip6tables) runner whose xtables lock wait
// ends with ctx's deadline.
func (e *Env) IPTables(ctx context.Context, proto iptables.Protocol) (*iptables.IPTables, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ipt := e.ipt[proto]; ipt != nil {
		return ipt, nil
	}
	wait := 1
	if d, ok := ctx.Deadline(); ok {
		wait = max(1, int(math.Ceil(time.Until(d).Seconds())))
	}
	ipt, err := iptables.New(iptables.IPFamily(proto), iptables.Timeout(wait))
	if err != nil {
		return nil, fmt.Errorf("iptables: %w", err)
	}
	if e.ipt == nil {
		e.ipt = map[iptables.Protocol]*iptables.IPTables{}
	}
	e.ipt[proto] = ipt
	return ipt, nil
}

// iptablesIsNFT reports whether iptables is the nf_tables variant
// (xtables-nft-multi), whose changes raise nftables notifications.
func (e *Env) iptablesIsNFT() bool {
	e.nftOnce.Do(func() {
		path, err := exec.LookPath("iptables")
		if err != nil {
			return
		}
		if real, err := filepath.EvalSymlinks(path); err == nil {
			e.isNFT = strings.Contains(filepath.Base(real), "nft")
		}
	})
	return e.isNFT
}

// withNFTables runs fn with the Env's nftables connections (host netns),
// one fn at a time: google/nftables sends a request and receives its reply
// in two calls, so two requests at once on one connection could read each
// other's replies. Connections that failed are closed; the next call opens
// fresh ones.
func (e *Env) withNFTables(fn func(*nftConns) error) error {
	e.nftMu.Lock()
	defer e.nftMu.Unlock()
	if e.nft == nil {
		lib, err := nftables.New(nftables.AsLasting())
		if err != nil {
			return fmt.Errorf("nftables: %w", err)
		}
		raw, err := rawnl.Dial(unix.NETLINK_NETFILTER, nil)
		if err != nil {
			lib.CloseLasting()
			return fmt.Errorf("nftables: %w", err)
		}
		e.nft = &nftConns{lib: lib, raw: raw}
	}
	err := fn(e.nft)
	if err != nil && !isMissing(err) {
		e.nft.close()
		e.nft = nil
	}
	return err
}

// Close releases the handles.
func (e *Env) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pod != nil {
		e.pod.Close()
		e.pod = nil
	}
	e.nftMu.Lock()
	defer e.nftMu.Unlock()
	if e.nft != nil {
		e.nft.close()
		e.nft = nil
	}
}

// Build turns the configured checks into Checks for one attachment. Checks
// that apply per IP (address, route, gateway, or any using {{.IP}}) are
// made once per pod IP.
func Build(confs []config.CheckConf, att *attachment.Attachment, env *Env) ([]Check, error) {
	var out []Check
	for i := range confs {
		cs, err := build(&confs[i], att, env)
		if err != nil {
			return nil, fmt.Errorf("checks[%d] (%s): %w", i, confs[i].Kind, err)
		}
		out = append(out, cs...)
	}
	return out, nil
}

func build(cc *config.CheckConf, att *attachment.Attachment, env *Env) ([]Check, error) {
	if len(att.IPs) == 0 && perIPKind(cc) {
		return []Check{&noIPCheck{kind: cc.Kind, env: env, ifName: att.IfName}}, nil
	}
	switch cc.Kind {
	case config.KindAddress:
		var out []Check
		for _, ip := range att.IPs {
			out = append(out, &addressCheck{env: env, ifName: att.IfName, ip: ip.Address.IP})
		}
		return out, nil
	case config.KindRoute:
		var out []Check
		for _, ip := range att.IPs {
			out = append(out, &routeCheck{ip: ip.Address.IP})
		}
		return out, nil
	case config.KindGateway:
		var out []Check
		for _, ip := range att.IPs {
			if ip.Gateway != nil {
				out = append(out, &gatewayCheck{env: env, ifName: att.IfName, gw: ip.Gateway})
			}
		}
		if len(out) == 0 && len(att.IPs) > 0 {
			return nil, never("the result gives no gateway for any pod IP")
		}
		return out, nil
	}
	return buildPolicy(cc, att, env)
}

// perIPKind reports whether a check is made once per pod IP, so that an
// attachment without IPs would expand it to nothing.
func perIPKind(cc *config.CheckConf) bool {
	switch cc.Kind {
	case config.KindAddress, config.KindRoute, config.KindGateway:
		return true
	case config.KindNFTables:
		if cc.Set != "" {
			return true
		}
	}
	return cc.UsesIP()
}

// perIP expands a check's strings once per pod IP when it uses {{.IP}},
// else once.
func perIP(cc *config.CheckConf, att *attachment.Attachment, make func(p config.Placeholders) (Check, error)) ([]Check, error) {
	ips := []net.IP{nil}
	if cc.UsesIP() {
		ips = ips[:0]
		for _, ip := range att.IPs {
			ips = append(ips, ip.Address.IP)
		}
	}
	var out []Check
	for _, ip := range ips {
		c, err := make(placeholders(att, ip))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// placeholders gives the values for a check's strings; ip may be nil.
func placeholders(a *attachment.Attachment, ip net.IP) config.Placeholders {
	p := config.Placeholders{
		ContainerID:  a.ContainerID,
		IfName:       a.IfName,
		Network:      a.Network,
		PodNamespace: a.Pod.Namespace,
		PodName:      a.Pod.Name,
		PodUID:       a.Pod.UID,
	}
	if ip != nil {
		p.IP = ip.String()
	}
	return p
}

func family(ip net.IP) int {
	if ip.To4() != nil {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}
