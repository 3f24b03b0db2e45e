// Package endpoint parses the addresses netready dials: an IP literal on
// loopback over http://, or a unix socket. A name is never resolved, so
// that no answer can come from off the node. Configuration, the checks
// and the pool's agents all parse their endpoints here.
package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
)

// Why an address is refused. The errors Parse returns wrap one of these,
// or url.Parse's error.
var (
	ErrNotLoopback   = errors.New("is not an IP literal on loopback")
	ErrScheme        = errors.New("the scheme must be unix or http")
	ErrSocketPath    = errors.New("must be unix:///absolute/path.sock")
	ErrSocketTooLong = errors.New("unix socket path longer than 107 bytes")
)

// maxSocketPath is the longest socket path the kernel's sockaddr_un holds
// with its terminating zero.
const maxSocketPath = 107

// Endpoint is an address that may be dialled.
type Endpoint struct {
	// URL is the address as parsed.
	URL *url.URL
	// Network and Address are what to dial: "unix" and the socket's path,
	// or "tcp" and host:port, with localhost as 127.0.0.1 and port 80
	// when the URL names none.
	Network, Address string
	// Host is the Host header to send: the URL's host, or "localhost" for
	// a socket.
	Host string
}

// Parse parses raw, an http:// URL whose host is loopback (IsLoopbackHost)
// or a unix:///absolute/path.sock.
func Parse(raw string) (Endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%q: %w", raw, err)
	}
	switch u.Scheme {
	case "http":
		host := u.Hostname()
		if !IsLoopbackHost(host) {
			return Endpoint{}, fmt.Errorf("%q %w", raw, ErrNotLoopback)
		}
		if host == "localhost" {
			host = "127.0.0.1"
		}
		port := u.Port()
		if port == "" {
			port = "80"
		}
		return Endpoint{URL: u, Network: "tcp", Address: net.JoinHostPort(host, port), Host: u.Host}, nil
	case "unix":
		if u.Host != "" || !filepath.IsAbs(u.Path) {
			return Endpoint{}, fmt.Errorf("%q %w", raw, ErrSocketPath)
		}
		if len(u.Path) > maxSocketPath {
			return Endpoint{}, fmt.Errorf("%q: %w", raw, ErrSocketTooLong)
		}
		return Endpoint{URL: u, Network: "unix", Address: u.Path, Host: "localhost"}, nil
	default:
		return Endpoint{}, fmt.Errorf("%q: %w", raw, ErrScheme)
	}
}

// Dial opens a connection to e.
func (e Endpoint) Dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, e.Network, e.Address)
}

// IsLoopbackHost reports whether host (as url.URL.Hostname returns it) is
// an IP literal in 127.0.0.0/8, ::1, or exactly "localhost". Anything else,
// "127.attacker.example" included, would need a name lookup.
func IsLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return false
	}
	return (ip.Is4() && ip.As4()[0] == 127) || ip == netip.IPv6Loopback()
}
