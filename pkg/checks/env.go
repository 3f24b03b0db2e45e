package checks

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/google/nftables"
	rawnl "github.com/mdlayher/netlink"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

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
