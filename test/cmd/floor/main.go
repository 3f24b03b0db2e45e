// Command floor is the bench's floor for an ADD whose checks are already
// met: the kernel work netready's address and route checks and its marker
// need, and nothing else. It opens a netlink socket in the pod's netns,
// looks up the link and its addresses there, looks up the route to the pod
// IP in the host, writes a file as the marker is written (fsync, rename,
// fsync of the folder), and prints prevResult. It parses no config and
// checks nothing, but exits 1 if any of that work fails, so that the bench
// never takes a floor that skipped part of it.
//
// With NETREADY_FLOOR_POLL and NETREADY_FLOOR_FOR, it only wakes every
// NETREADY_FLOOR_POLL for NETREADY_FLOOR_FOR: the floor of a polled check.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run() error {
	if every := os.Getenv("NETREADY_FLOOR_POLL"); every != "" {
		return wakeOnly(every, os.Getenv("NETREADY_FLOOR_FOR"))
	}
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	var conf struct {
		StateDir   string          `json:"stateDir"`
		PrevResult json.RawMessage `json:"prevResult"`
	}
	var prev struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return err
	}
	if err := json.Unmarshal(conf.PrevResult, &prev); err != nil || len(prev.IPs) == 0 {
		return fmt.Errorf("prevResult with no IP: %v", err)
	}
	ip := net.ParseIP(strings.Split(prev.IPs[0].Address, "/")[0])

	nsh, err := netns.GetFromPath(os.Getenv("CNI_NETNS"))
	if err != nil {
		return fmt.Errorf("netns %s: %w", os.Getenv("CNI_NETNS"), err)
	}
	h, err := netlinksafe.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	nsh.Close()
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(os.Getenv("CNI_IFNAME"))
	if err != nil {
		return fmt.Errorf("link %s: %w", os.Getenv("CNI_IFNAME"), err)
	}
	if _, err := h.AddrList(link, netlink.FAMILY_V4); err != nil {
		return err
	}
	if _, err := netlink.RouteGetWithOptions(ip, &netlink.RouteGetOptions{FIBMatch: true}); err != nil {
		return err
	}

	dir := filepath.Join(conf.StateDir, "floor")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return err
	}
	if _, err := f.Write(stdin[:min(len(stdin), 600)]); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, os.Getenv("CNI_CONTAINERID")+".json")); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return err
	}
	_, err = os.Stdout.Write(conf.PrevResult)
	return err
}

// wakeOnly is the floor of a polled check: a process that wakes every
// interval for a while and does nothing else, no request and no probe.
func wakeOnly(every, span string) error {
	tick, err := time.ParseDuration(every)
	if err != nil {
		return fmt.Errorf("NETREADY_FLOOR_POLL: %w", err)
	}
	d, err := time.ParseDuration(span)
	if err != nil {
		return fmt.Errorf("NETREADY_FLOOR_FOR: %w", err)
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(tick)
	}
	return nil
}
