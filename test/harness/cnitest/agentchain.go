//go:build integration

package cnitest

import (
	"encoding/json"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
)

// ServeTCP listens on port in the netns at nsPath and closes each
// connection it accepts: the server of the real agents' first-packet
// tests. The test's cleanup stops it.
func ServeTCP(t testing.TB, nsPath string, port int) {
	t.Helper()
	var l net.Listener
	if err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp4", ":"+strconv.Itoa(port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// FirstConnect is a pod's first action: one TCP connection from the netns
// at nsPath to addr, with a timeout short of the first SYN retry (1 s),
// so that nothing rescues a dropped first packet.
func FirstConnect(nsPath, addr string) error {
	return ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp4", addr, 700*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// AgentChain is the conflist name at 1.1.0: the vendor's plugin, then
// netready's entry when it is not nil.
func AgentChain(t *testing.T, name string, vendor, netready map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	plugins := []any{vendor}
	if netready != nil {
		plugins = append(plugins, netready)
	}
	data, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": name, "plugins": plugins})
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	return list
}
