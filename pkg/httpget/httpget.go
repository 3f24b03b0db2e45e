// Package httpget owns netready's one HTTP exchange: a GET to a loopback
// or unix-socket agent endpoint over HTTP/1.1, with no proxy, no
// redirects, no keep-alive and no TLS. net/http does the same and links
// TLS, HTTP/2, proxies and cookies besides: 4 of the plugin's 10.6 MB, for
// a binary the runtime starts once per pod and every few seconds for
// STATUS.
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

// Get sends "GET target" with Host host over the connection dial opens,
// and reads the answer: the body up to maxBody+1 bytes when readBody.
// ctx bounds all of it.
func Get(ctx context.Context, dial func(context.Context) (net.Conn, error), host, target string, readBody bool, maxBody int) (*Response, error) {
	conn, err := dial(ctx)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	// A cancelled context ends a blocked read or write at once.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: netready\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("send: %w", err))
	}
	head := &io.LimitedReader{R: conn, N: maxHeader}
	br := bufio.NewReader(head)
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, ctxErr(ctx, headerErr(head, fmt.Errorf("read status line: %w", err)))
	}
	resp, err := parseStatusLine(line)
	if err != nil {
		return nil, err
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, ctxErr(ctx, headerErr(head, fmt.Errorf("read headers: %w", err)))
	}
	if !readBody {
		return resp, nil
	}
	// What br holds already, then the connection, bound now by the body's
	// limit, with room for chunk framing (and never unbounded: a chunk
	// size line could be endless).
	head.N = 2*int64(maxBody) + 1<<16
	body, err := bodyReader(br, h)
	if err != nil {
		return nil, err
	}
	resp.Body, err = io.ReadAll(io.LimitReader(body, int64(maxBody)+1))
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("read body: %w", err))
	}
	return resp, nil
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
// with the connection (Connection: close was asked for).
func bodyReader(br *bufio.Reader, h textproto.MIMEHeader) (io.Reader, error) {
	if te := strings.ToLower(strings.TrimSpace(h.Get("Transfer-Encoding"))); te != "" {
		if te != "chunked" {
			return nil, fmt.Errorf("unsupported Transfer-Encoding %q", te)
		}
		return &chunked{r: br}, nil
	}
	if cl := h.Get("Content-Length"); cl != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad Content-Length %q", cl)
		}
		return io.LimitReader(br, n), nil
	}
	return br, nil
}

// chunked decodes Transfer-Encoding: chunked (RFC 9112 section 7.1);
// extensions and trailers are skipped.
type chunked struct {
	r    *bufio.Reader
	left int64 // of the current chunk
	done bool
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
