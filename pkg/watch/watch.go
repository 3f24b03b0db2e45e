// Package watch owns the event subscriptions that wake waiting checks:
// netlink link, address, route and neighbour events in a given netns, and
// other kernel notifications. A Hub opens each distinct source once and
// fans its events out. A wake says only that something may have changed,
// so checks re-probe, except where the event itself shows what a check
// waits for (an nftables set element, or a matching rule).
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
	// Dir is inotify on a folder (Path), waking for changes of its entry
	// Name, or of any entry when Name is "".
	Dir
	// OVSDB is a monitor of Open_vSwitch's Interface table on the OVSDB
	// server whose unix socket is Path.
	OVSDB
	// NFTSet is nftables notifications that may add Element to its set,
	// in a netns.
	NFTSet
	// NFTRule is nftables notifications of new rules of Rule's chain
	// that match, or may match, Rule.Match, in a netns.
	NFTRule
)

func (k Kind) String() string {
	return [...]string{"links", "addresses", "routes", "neighbours", "folder", "OVSDB Interface table", "nftables elements", "nftables rules"}[k]
}

// Source names one event stream. NetNS "" is the caller's own netns.
type Source struct {
	Kind  Kind
	NetNS string
	Path  string
	// Name is the entry of a Dir source's folder that wakes; "" is any.
	Name string
	// Element is what an NFTSet source watches for.
	Element NFTElement
	// Rule is what an NFTRule source watches for.
	Rule NFTRuleMatch
}

// Wake is one wake-up of a listener.
type Wake struct {
	// Shows is set when the event itself shows what the listener waits
	// for: an NFTSet transaction committed its element, or an NFTRule one
	// a matching rule. The kernel sends that notification after the
	// commit, so no probe need confirm it.
	Shows bool
}

func (s Source) String() string {
	where := "host netns"
	if s.NetNS != "" {
		where = s.NetNS
	}
	if s.Path != "" {
		where = s.Path
	}
	switch s.Kind {
	case NFTSet:
		return fmt.Sprintf("%s of set %s/%s in %s", s.Kind, s.Element.Table, s.Element.Set, where)
	case NFTRule:
		return fmt.Sprintf("%s of chain %s/%s in %s", s.Kind, s.Rule.Table, s.Rule.Chain, where)
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
	listeners []chan Wake
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

// SubscribeTo makes ch (buffered, so that events coalesce) receive a Wake
// after any event of src. The stream is open when SubscribeTo returns, so a
// probe made afterwards cannot miss a change.
func (h *Hub) SubscribeTo(src Source, ch chan Wake) error {
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
func (h *Hub) pump(src Source, events <-chan Wake) {
	defer h.wg.Done()
	for {
		for w := range events {
			h.wake(src, w)
		}
		if h.ctx.Err() != nil {
			return
		}
		h.wake(src, Wake{})
		select {
		case <-h.ctx.Done():
			return
		case <-time.After(resubscribeDelay):
		}
		var err error
		if events, err = openStream(h.ctx, src); err != nil {
			events = closedStream()
		}
		h.wake(src, Wake{})
	}
}

func (h *Hub) wake(src Source, w Wake) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.streams[src].listeners {
		send(ch, w)
	}
}

// send wakes without blocking, and the wake a listener reads is always the
// latest one sent: a full channel's wake is replaced. So a wake that shows
// the element never outlives a later one that does not (the element added,
// then removed again before the listener looked), and the listener then
// probes. Each channel has one sender at a time (a stream's own goroutine,
// or the hub under its lock), so the second put cannot fail.
func send(ch chan Wake, w Wake) {
	select {
	case ch <- w:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	select {
	case ch <- w:
	default:
	}
}

func closedStream() <-chan Wake {
	ch := make(chan Wake)
	close(ch)
	return ch
}

// openStream opens one stream. The returned channel closes when ctx ends or
// the stream fails.
func openStream(ctx context.Context, src Source) (<-chan Wake, error) {
	switch src.Kind {
	case Dir:
		return openDir(ctx, src.Path, src.Name)
	case NFTSet, NFTRule:
		return openNFTables(ctx, src)
	case OVSDB:
		updates, err := ovsdb.Monitor(ctx, src.Path, "Open_vSwitch", "Interface", []string{"external_ids"})
		if err != nil {
			return nil, err
		}
		out := make(chan Wake, 1)
		go func() {
			defer close(out)
			forwardAll(updates, out)
		}()
		return out, nil
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
	out := make(chan Wake, 1)
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

// forwardAll turns each update into a coalesced wake until in closes.
func forwardAll[T any](in <-chan T, out chan Wake) {
	for range in {
		send(out, Wake{})
	}
}
