// Package watch owns the event subscriptions that wake waiting checks:
// netlink link, address, route and neighbour events in a given netns, and
// other kernel notifications. A Hub opens each distinct source once and
// fans its events out; it never tells what changed, only that something may
// have, so checks re-probe.
package watch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/netready/netready/pkg/ovsdb"
)

// Kind is a kind of event source.
type Kind int

// Event source kinds.
const (
	Links Kind = iota
	Addrs
	Routes
	Neighs
	// Dir is inotify on a folder (Path).
	Dir
	// NFTables is nftables netlink notifications in a netns.
	NFTables
	// OVSDB is a monitor of Open_vSwitch's Interface table on the OVSDB
	// server whose unix socket is Path.
	OVSDB
)

func (k Kind) String() string {
	return [...]string{"links", "addresses", "routes", "neighbours", "folder", "nftables", "OVSDB Interface table"}[k]
}

// Source names one event stream. NetNS "" is the caller's own netns.
type Source struct {
	Kind  Kind
	NetNS string
	Path  string
}

func (s Source) String() string {
	where := "host netns"
	if s.NetNS != "" {
		where = s.NetNS
	}
	if s.Path != "" {
		where = s.Path
	}
	return fmt.Sprintf("%s in %s", s.Kind, where)
}

// resubscribeDelay is how long a failed stream waits before it reopens.
const resubscribeDelay = 100 * time.Millisecond

// Hub fans out events. Its lock guards only its map, never a wait.
type Hub struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	streams map[Source]*stream
}

// stream is one open source and who listens to it.
type stream struct {
	opened    chan struct{} // closed once the open attempt is over
	err       error         // set before opened closes
	listeners []chan struct{}
}

// NewHub returns a hub whose streams end with ctx or Close.
func NewHub(ctx context.Context) *Hub {
	ctx, cancel := context.WithCancel(ctx)
	return &Hub{ctx: ctx, cancel: cancel, streams: map[Source]*stream{}}
}

// Close ends every stream and waits for them.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
}

// SubscribeTo makes ch (buffered, so that events coalesce) receive a token
// after any event of src. The stream is open when SubscribeTo returns, so a
// probe made afterwards cannot miss a change.
func (h *Hub) SubscribeTo(src Source, ch chan struct{}) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return errors.New("watch hub is closed")
	}
	st, exists := h.streams[src]
	if !exists {
		st = &stream{opened: make(chan struct{})}
		h.streams[src] = st
		// Reserved under the lock, so that Close never waits while a
		// stream is still being added.
		h.wg.Add(1)
	}
	st.listeners = append(st.listeners, ch)
	h.mu.Unlock()
	if exists {
		<-st.opened
		return st.err
	}
	events, err := openStream(h.ctx, src)
	if err != nil {
		st.err = fmt.Errorf("cannot watch %s: %w", src, err)
		close(st.opened)
		h.wg.Done()
		return st.err
	}
	close(st.opened)
	go h.pump(src, events)
	return nil
}

// pump forwards events of one stream, reopening it if it fails (for
// instance on ENOBUFS), and waking listeners so that they re-probe.
func (h *Hub) pump(src Source, events <-chan struct{}) {
	defer h.wg.Done()
	for {
		for range events {
			h.wake(src)
		}
		if h.ctx.Err() != nil {
			return
		}
		h.wake(src)
		select {
		case <-h.ctx.Done():
			return
		case <-time.After(resubscribeDelay):
		}
		var err error
		if events, err = openStream(h.ctx, src); err != nil {
			events = closedStream()
		}
		h.wake(src)
	}
}

func (h *Hub) wake(src Source) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.streams[src].listeners {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func closedStream() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// openStream opens one stream. The returned channel closes when ctx ends or
// the stream fails.
func openStream(ctx context.Context, src Source) (<-chan struct{}, error) {
	switch src.Kind {
	case Dir:
		return openDir(ctx, src.Path)
	case NFTables:
		return openNFTables(ctx, src.NetNS)
	case OVSDB:
		return ovsdb.Monitor(ctx, src.Path, "Open_vSwitch", "Interface", []string{"external_ids"})
	}
	var nsh *netns.NsHandle
	if src.NetNS != "" {
		h, err := netns.GetFromPath(src.NetNS)
		if err != nil {
			return nil, fmt.Errorf("cannot open netns: %w", err)
		}
		nsh = &h
	}
	done := make(chan struct{})
	out := make(chan struct{}, 1)
	var err error
	var forward func()
	// onErr records a stream failure; the netlink library closes its channel
	// right after, which ends forward.
	onErr := func(error) {}
	switch src.Kind {
	case Links:
		ch := make(chan netlink.LinkUpdate, 64)
		err = netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{Namespace: nsh, ErrorCallback: onErr})
		forward = func() { forwardAll(ch, out) }
	case Addrs:
		ch := make(chan netlink.AddrUpdate, 64)
		err = netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{Namespace: nsh, ErrorCallback: onErr})
		forward = func() { forwardAll(ch, out) }
	case Routes:
		ch := make(chan netlink.RouteUpdate, 64)
		err = netlink.RouteSubscribeWithOptions(ch, done, netlink.RouteSubscribeOptions{Namespace: nsh, ErrorCallback: onErr})
		forward = func() { forwardAll(ch, out) }
	case Neighs:
		ch := make(chan netlink.NeighUpdate, 64)
		err = netlink.NeighSubscribeWithOptions(ch, done, netlink.NeighSubscribeOptions{Namespace: nsh, ErrorCallback: onErr})
		forward = func() { forwardAll(ch, out) }
	default:
		err = fmt.Errorf("unknown source kind %d", src.Kind)
	}
	if nsh != nil {
		// The subscription holds its own socket in the netns.
		nsh.Close()
	}
	if err != nil {
		return nil, err
	}
	go func() {
		<-ctx.Done()
		close(done)
	}()
	go func() {
		defer close(out)
		forward()
	}()
	return out, nil
}

// forwardAll turns each update into a coalesced token until in closes.
func forwardAll[T any](in <-chan T, out chan<- struct{}) {
	for range in {
		token(out)
	}
}
