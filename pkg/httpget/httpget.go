// Package httpget owns netready's one HTTP exchange: a GET to a loopback
// or unix-socket agent endpoint over HTTP/1.1, with no proxy, no
// redirects and no TLS, over a kept connection where the server allows.
// net/http does the same and links TLS, HTTP/2, proxies and cookies
// besides, which every start of the plugin would load: the runtime starts
// it once per pod and every few seconds for STATUS.
package httpget

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxHeader bounds the status line and headers.
const maxHeader = 64 << 10

// Response is what a GET answered.
type Response struct {
	// StatusCode is the status code; Status is "404 Not Found".
	StatusCode int
	Status     string
	// Body holds up to the caller's limit plus one byte, so that the
	// caller can tell an answer that is too large; nil when not read.
	Body []byte
}

// ErrTooLarge: the headers alone went over the bound.
var ErrTooLarge = errors.New("the answer's headers are too large")

// Get sends "GET target" with Host host over a connection dial opens, asks
// the server to close it, and reads the answer: the body up to maxBody+1
// bytes when readBody. ctx bounds all of it.
func Get(ctx context.Context, dial func(context.Context) (net.Conn, error), host, target string, readBody bool, maxBody int) (*Response, error) {
	conn, err := dial(ctx)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	defer conn.Close()
	resp, _, err := newKept(conn).exchange(ctx, host, target, false, readBody, maxBody)
	return resp, err
}

// Client sends GETs over one connection that it keeps between them while
// the server allows (HTTP/1.1 keep-alive): a check polled every 45 ms then
// costs one request and answer instead of a TCP handshake and teardown
// each time, on both ends. An idle connection is closed after
// IdleTimeout. A Client is safe for use by several goroutines; they take
// turns on the one connection, or open their own.
type Client struct {
	Dial func(context.Context) (net.Conn, error)

	mu    sync.Mutex
	idle  *kept
	timer *time.Timer // closes idle after IdleTimeout
}

// IdleTimeout is how long a Client keeps an unused connection.
const IdleTimeout = time.Second

// maxDrain bounds the body read only to keep a connection: a longer one
// closes it instead.
const maxDrain = 64 << 10

// Get is the package's Get over the Client's kept connection, or a new one.
// A kept connection the server has closed in the meantime is replaced
// once: a GET may be sent again.
func (c *Client) Get(ctx context.Context, host, target string, readBody bool, maxBody int) (*Response, error) {
	if k := c.take(); k != nil {
		resp, reusable, err := k.exchange(ctx, host, target, true, readBody, maxBody)
		if err == nil || ctx.Err() != nil {
			c.putOrClose(k, reusable && err == nil)
			return resp, err
		}
		k.conn.Close()
	}
	conn, err := c.Dial(ctx)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	k := newKept(conn)
	resp, reusable, err := k.exchange(ctx, host, target, true, readBody, maxBody)
	c.putOrClose(k, reusable && err == nil)
	return resp, err
}

// CloseIdle closes the kept connection, if any.
func (c *Client) CloseIdle() {
	if k := c.take(); k != nil {
		k.conn.Close()
	}
}

func (c *Client) take() *kept {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.idle
	c.idle = nil
	if c.timer != nil {
		c.timer.Stop()
	}
	return k
}

func (c *Client) putOrClose(k *kept, reusable bool) {
	if !reusable {
		k.conn.Close()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle != nil {
		// Another goroutine kept its own meanwhile.
		k.conn.Close()
		return
	}
	c.idle = k
	if c.timer == nil {
		c.timer = time.AfterFunc(IdleTimeout, c.CloseIdle)
	} else {
		c.timer.Reset(IdleTimeout)
	}
}

// kept is a connection and the readers over it.
type kept struct {
	conn net.Conn
	head io.LimitedReader // bounds what one answer may read
	br   *bufio.Reader
}

func newKept(conn net.Conn) *kept {
	k := &kept{conn: conn}
	k.head.R = conn
	k.br = bufio.NewReader(&k.head)
	return k
}

// exchange sends one GET and reads its answer, and says whether the
// connection may carry another: keep was asked, the server did not refuse
// it, and the whole answer was read.
func (k *kept) exchange(ctx context.Context, host, target string, keep, readBody bool, maxBody int) (*Response, bool, error) {
	conn := k.conn
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	// A cancelled context ends a blocked read or write at once.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: netready\r\nAccept: application/json\r\n"
	if !keep {
		req += "Connection: close\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		return nil, false, ctxErr(ctx, fmt.Errorf("send: %w", err))
	}
	k.head.N = maxHeader
	tp := textproto.NewReader(k.br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, false, ctxErr(ctx, headerErr(&k.head, fmt.Errorf("read status line: %w", err)))
	}
	resp, err := parseStatusLine(line)
	if err != nil {
		return nil, false, err
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, false, ctxErr(ctx, headerErr(&k.head, fmt.Errorf("read headers: %w", err)))
	}
	// What br holds already, then the connection, bound now by the body's
	// limit, with room for chunk framing (and never unbounded: a chunk
	// size line could be endless).
	k.head.N = 2*int64(max(maxBody, maxDrain)) + 1<<16
	body, framed, err := bodyReader(k.br, h, resp.StatusCode)
	if err != nil && readBody {
		return nil, false, err
	}
	// A body that is not read need not be understood, only not kept.
	reusable := err == nil && keep && framed && strings.HasPrefix(line, "HTTP/1.1 ") && !hasToken(h.Values("Connection"), "close")
	if readBody {
		resp.Body, err = io.ReadAll(io.LimitReader(body, int64(maxBody)+1))
		if err != nil {
			return nil, false, ctxErr(ctx, fmt.Errorf("read body: %w", err))
		}
		reusable = reusable && len(resp.Body) <= maxBody
	} else if reusable {
		n, err := io.CopyN(io.Discard, body, maxDrain+1)
		reusable = n <= maxDrain && errors.Is(err, io.EOF)
	}
	if ch, ok := body.(*chunked); ok && ch.cut {
		reusable = false
	}
	if !stop() {
		// ctx ended: the deadline is in the past.
		reusable = false
	}
	if reusable {
		reusable = k.br.Buffered() == 0 && conn.SetDeadline(time.Time{}) == nil
	}
	return resp, reusable, nil
}

// hasToken reports whether a comma-separated header holds token.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func parseStatusLine(line string) (*Response, error) {
	proto, status, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/1.") {
		return nil, fmt.Errorf("not an HTTP/1.x answer: %q", truncate(line))
	}
	code, _, _ := strings.Cut(status, " ")
	n, err := strconv.Atoi(code)
	if err != nil || len(code) != 3 || n < 100 {
		return nil, fmt.Errorf("bad status line: %q", truncate(line))
	}
	return &Response{StatusCode: n, Status: status}, nil
}

// bodyReader reads a chunked body, one of Content-Length, or one that ends
// with the connection; framed says the answer's end is known without the
// connection closing, so that it may carry another request.
func bodyReader(br *bufio.Reader, h textproto.MIMEHeader, code int) (io.Reader, bool, error) {
	switch {
	case code < 200:
		// An interim answer (netready never asks for one): the final
		// answer follows it on the connection, so it is not kept.
		return io.LimitReader(br, 0), false, nil
	case code == 204 || code == 304:
		return io.LimitReader(br, 0), true, nil
	}
	if te := strings.ToLower(strings.TrimSpace(h.Get("Transfer-Encoding"))); te != "" {
		if te != "chunked" {
			return nil, false, fmt.Errorf("unsupported Transfer-Encoding %q", te)
		}
		return &chunked{r: br}, true, nil
	}
	if cl := h.Get("Content-Length"); cl != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64)
		if err != nil || n < 0 {
			return nil, false, fmt.Errorf("bad Content-Length %q", cl)
		}
		return io.LimitReader(br, n), true, nil
	}
	return br, false, nil
}

// chunked decodes Transfer-Encoding: chunked (RFC 9112 section 7.1);
// extensions and trailers are skipped.
type chunked struct {
	r    *bufio.Reader
	left int64 // of the current chunk
	done bool
	cut  bool // the trailer section did not end
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.done {
		return 0, io.EOF
	}
	if c.left == 0 {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return 0, fmt.Errorf("chunk size: %w", noEOF(err))
		}
		size, _, _ := strings.Cut(strings.TrimSpace(line), ";")
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bad chunk size %q", truncate(line))
		}
		if n == 0 {
			// The trailer section, up to its empty line, so that the
			// connection is left at the next answer.
			for {
				line, err := c.r.ReadString('\n')
				if err != nil {
					// The body is whole; only the connection is
					// not fit to keep.
					c.cut = true
					break
				}
				if strings.TrimSpace(line) == "" {
					break
				}
			}
			c.done = true
			return 0, io.EOF
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left == 0 && err == nil {
		// The CRLF after the chunk's data.
		if _, err = c.r.Discard(2); err != nil {
			return n, noEOF(err)
		}
	}
	return n, noEOF(err)
}

// noEOF: a body that ends inside a chunk is cut short.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func headerErr(head *io.LimitedReader, err error) error {
	if head.N <= 0 {
		return ErrTooLarge
	}
	return err
}

// ctxErr says "deadline" rather than "i/o timeout" when ctx ended it. The
// socket's deadline can fire a moment before ctx's timer does.
func ctxErr(ctx context.Context, err error) error {
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		<-ctx.Done()
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
