// Command netready-standin stands in for a vendor's main CNI plugin
// (calico, cilium-cni, ovn-k8s-cni-overlay) in tests that run the vendor's
// stock conflist, whose plugin binaries the module proxy does not serve.
// It takes whatever keys the stock config has and does what every main
// plugin does first: a veth into the pod with an address and a default
// route, and the host's route to it. Then, like the vendor's node agent after CNI ADD returns, it
// starts a hook in the background, which programs the pod's dataplane the
// way that vendor's agent signals it (Felix's endpoint-status file, an OVS
// port that ovn-controller marks ovn-installed).
//
// A test that needs distinct addresses passes STANDIN_IP in CNI_ARGS;
// otherwise the address comes from the container ID.
//
// Its settings sit beside the binary, in <binary>.standin.json:
// {"subnet": "10.200.93.0/24", "hook": "/path/to/script", "txChecksumOff": true}. The hook gets
// CNI_CONTAINERID, CNI_IFNAME, K8S_POD_NAMESPACE, K8S_POD_NAME, POD_IP,
// POD_MAC and HOST_VETH in its environment.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"unsafe"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ip"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

type settings struct {
	Subnet string `json:"subnet"`
	Hook   string `json:"hook"`
	// TxChecksumOff turns transmit checksum offload off on the pod's
	// veth: OVS's userspace datapath forwards a veth's partial checksums
	// as they are, and the receiver drops such TCP segments.
	TxChecksumOff bool `json:"txChecksumOff"`
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: func(*skel.CmdArgs) error { return nil }},
		version.All, "netready-standin")
}

func loadSettings() (*settings, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(self + ".standin.json")
	if err != nil {
		return nil, fmt.Errorf("stand-in settings: %w", err)
	}
	var s settings
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("stand-in settings: %w", err)
	}
	return &s, nil
}

// podAddress picks an address in subnet from the container ID: stable
// across CHECK, and distinct enough for the few pods a test runs.
func podAddress(subnet *net.IPNet, containerID string) *net.IPNet {
	h := fnv.New32a()
	h.Write([]byte(containerID))
	addr := ip.NextIP(subnet.IP.Mask(subnet.Mask)).To4()
	out := make(net.IP, 4)
	copy(out, addr)
	out[3] += byte(1 + h.Sum32()%200)
	return &net.IPNet{IP: out, Mask: subnet.Mask}
}

func cmdAdd(args *skel.CmdArgs) error {
	var conf types.NetConf
	if err := json.Unmarshal(args.StdinData, &conf); err != nil {
		return fmt.Errorf("stand-in config: %w", err)
	}
	s, err := loadSettings()
	if err != nil {
		return err
	}
	_, subnet, err := net.ParseCIDR(s.Subnet)
	if err != nil {
		return fmt.Errorf("stand-in subnet: %w", err)
	}
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return err
	}
	defer func() { _ = netns.Close() }()
	addr := podAddress(subnet, args.ContainerID)
	if fixed := cniArg(args.Args, "STANDIN_IP"); fixed != "" {
		addr = &net.IPNet{IP: net.ParseIP(fixed).To4(), Mask: subnet.Mask}
	}
	var hostVeth, podVeth net.Interface
	err = netns.Do(func(host ns.NetNS) error {
		var err error
		hostVeth, podVeth, err = ip.SetupVeth(args.IfName, 1500, "", host)
		if err != nil {
			return err
		}
		link, err := netlink.LinkByName(args.IfName)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: addr}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return err
		}
		if s.TxChecksumOff {
			if err := txChecksumOff(args.IfName); err != nil {
				return err
			}
		}
		_, all, _ := net.ParseCIDR("0.0.0.0/0")
		return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: all, Scope: netlink.SCOPE_LINK})
	})
	if err != nil {
		return fmt.Errorf("stand-in veth: %w", err)
	}
	// The host's route to the pod, through its veth, as Calico's and
	// Cilium's plugins add one.
	host, err := netlink.LinkByName(hostVeth.Name)
	if err != nil {
		return err
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: &net.IPNet{IP: addr.IP, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("stand-in host route: %w", err)
	}
	if s.Hook != "" {
		if err := startHook(s.Hook, args, addr, hostVeth.Name, podVeth.HardwareAddr.String()); err != nil {
			return err
		}
	}
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{{Name: hostVeth.Name, Mac: hostVeth.HardwareAddr.String()},
			{Name: podVeth.Name, Mac: podVeth.HardwareAddr.String(), Sandbox: args.Netns}},
		IPs: []*current.IPConfig{{Address: *addr, Interface: current.Int(1)}}}
	return types.PrintResult(res, conf.CNIVersion)
}

// cniArg is the value of key in CNI_ARGS, or "".
func cniArg(cniArgs, key string) string {
	for _, kv := range strings.Split(cniArgs, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// startHook runs the agent's part in the background, as the vendor's node
// agent works after ADD has returned.
func startHook(hook string, args *skel.CmdArgs, addr *net.IPNet, hostVeth, podMAC string) error {
	cmd := exec.Command(hook)
	cmd.Env = append(os.Environ(), "CNI_CONTAINERID="+args.ContainerID, "CNI_IFNAME="+args.IfName,
		"POD_IP="+addr.IP.String(), "POD_MAC="+podMAC, "HOST_VETH="+hostVeth)
	for _, kv := range strings.Split(args.Args, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "K8S_POD_") {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("stand-in hook: %w", err)
	}
	return cmd.Process.Release()
}

// txChecksumOff is `ethtool -K name tx off` (ethtool is not installed
// here): the ETHTOOL_STXCSUM ioctl with value 0.
func txChecksumOff(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }()
	value := struct{ cmd, data uint32 }{cmd: unix.ETHTOOL_STXCSUM}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte
	}
	copy(ifr.name[:], name)
	ifr.data = unsafe.Pointer(&value)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return fmt.Errorf("ETHTOOL_STXCSUM off on %s: %w", name, errno)
	}
	return nil
}

func cmdDel(args *skel.CmdArgs) error {
	if args.Netns == "" {
		return nil
	}
	err := ns.WithNetNSPath(args.Netns, func(ns.NetNS) error {
		return ip.DelLinkByName(args.IfName)
	})
	var nsErr ns.NSPathNotExistErr
	if err != nil && (errors.As(err, &nsErr) || errors.Is(err, ip.ErrLinkNotFound)) {
		return nil
	}
	return err
}
