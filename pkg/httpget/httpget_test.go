package httpget

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// rawServer answers every connection with answer, after reading the
// request's head, and returns its address. A "|" in answer is a pause of
// 100 ms: what follows it arrives in a later read.
func rawServer(t *testing.T, answer string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				c.Read(buf)
				for i, part := range strings.Split(answer, "|") {
					if i > 0 {
						time.Sleep(100 * time.Millisecond)
					}
					io.WriteString(c, part)
				}
			}()
		}
	}()
	return l.Addr().String()
}

func dialer(addr string) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
}

func TestGet(t *testing.T) {
	tests := []struct {
		name    string
		answer  string
		max     int
		status  int
		body    string
		wantErr string
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello and more", 100, 200, "hello", ""},
		{"chunked with extension and trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nTrailer: z\r\n\r\n", 100, 200, "hello", ""},
		{"closed by the server", "HTTP/1.0 503 Service Unavailable\r\n\r\nbusy", 100, 503, "busy", ""},
		{"over the limit: one byte more than max", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", 4, 200, "01234", ""},
		{"cut inside a chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nhel", 100, 0, "", "unexpected EOF"},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 100, 0, "", "bad chunk size"},
		{"gzip transfer coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 100, 0, "", "unsupported Transfer-Encoding"},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", 100, 0, "", "not an HTTP/1.x answer"},
		{"bad status", "HTTP/1.1 2x0 OK\r\n\r\n", 100, 0, "", "bad status line"},
		{"bad content-length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 100, 0, "", "bad Content-Length"},
		{"headers without end", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxHeader) + "\r\n", 100, 0, "", "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := rawServer(t, tt.answer)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := Get(ctx, dialer(addr), addr, "/ready?ip=10.1.0.5", true, tt.max)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Get = %+v, %v; want an error containing %q", resp, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(fmt.Sprint(tt.status, " ", tt.body), fmt.Sprint(resp.StatusCode, " ", string(resp.Body))); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGetAgainstNetHTTP: what Go's own server sends, chunked when flushed
// or large, and the request it receives.
func TestGetAgainstNetHTTP(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.Write([]byte(`{"status":`))
		w.(http.Flusher).Flush()
		w.Write([]byte(strings.Repeat(" ", 100000) + `"ready"}`))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	resp, err := Get(context.Background(), dialer(addr), addr, "/v1/endpoint/a%2Fb?x=1", true, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasSuffix(string(resp.Body), `"ready"}`) || len(resp.Body) != 100018 {
		t.Errorf("answer %d, %d bytes", resp.StatusCode, len(resp.Body))
	}
	if got.Method != "GET" || got.URL.RawPath != "/v1/endpoint/a%2Fb" || got.URL.RawQuery != "x=1" || got.Host != addr || got.Header.Get("Connection") != "" && !got.Close {
		t.Errorf("request seen by net/http: %s %s host %s close %v", got.Method, got.URL, got.Host, got.Close)
	}
	// Without a body to read, the headers are enough.
	resp, err = Get(context.Background(), dialer(addr), addr, "/", false, 0)
	if err != nil || resp.StatusCode != 200 || resp.Body != nil {
		t.Errorf("headers only: %+v %v", resp, err)
	}
}

// TestGetHangs: an endpoint that never answers is cut at the deadline.
func TestGetHangs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // holds every connection open, silent
		}
	}()
	for _, cancelEarly := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		if cancelEarly {
			go func() { time.Sleep(50 * time.Millisecond); cancel() }()
		}
		start := time.Now()
		_, err := Get(ctx, dialer(l.Addr().String()), "x", "/", true, 100)
		cancel()
		if err == nil || time.Since(start) > 2*time.Second {
			t.Errorf("Get against a silent endpoint (cancel early %v) = %v after %s", cancelEarly, err, time.Since(start))
		}
	}
}

// FuzzGet: whatever an endpoint answers, Get returns within its deadline,
// never panics, and never hands back more than max+1 bytes of body.
func FuzzGet(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n"))
	f.Fuzz(func(t *testing.T, answer []byte) {
		const max = 64
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		dial := func(context.Context) (net.Conn, error) {
			client, server := net.Pipe()
			go func() {
				defer server.Close()
				buf := make([]byte, 512)
				server.Read(buf)
				server.Write(answer)
			}()
			return client, nil
		}
		resp, err := Get(ctx, dial, "x", "/", true, max)
		if err == nil && len(resp.Body) > max+1 {
			t.Fatalf("%d bytes of body, max %d", len(resp.Body), max)
		}
	})
}

// TestClientKeepsTheConnection: a Client sends its GETs over one
// connection while Go's own server keeps it, and opens another when the
// server closed it, asked to, answered too much to drain, or was idle.
func TestClientKeepsTheConnection(t *testing.T) {
	tests := []struct {
		name string
		// handler answers the i-th request (0-based).
		handler  func(i int, w http.ResponseWriter)
		readBody bool
		between  func(srv *httptest.Server)
		wantConn int // connections opened for three GETs
	}{
		{"404s, headers only", func(int, http.ResponseWriter) {}, false, nil, 1},
		{"JSON answers read", func(_ int, w http.ResponseWriter) { io.WriteString(w, `{"ready":false}`) }, true, nil, 1},
		{"chunked answers read", func(_ int, w http.ResponseWriter) {
			io.WriteString(w, "{")
			w.(http.Flusher).Flush()
			io.WriteString(w, "}")
		}, true, nil, 1},
		{"no body: 204", func(_ int, w http.ResponseWriter) { w.WriteHeader(204) }, false, nil, 1},
		{"the server asks to close", func(_ int, w http.ResponseWriter) { w.Header().Set("Connection", "close") }, false, nil, 3},
		{"a body too large to drain", func(_ int, w http.ResponseWriter) { w.Write(make([]byte, maxDrain+10)) }, false, nil, 3},
		{"the server drops kept connections", func(int, http.ResponseWriter) {}, false, func(srv *httptest.Server) { srv.CloseClientConnections() }, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			conns, reqs := 0, 0
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				i := reqs
				reqs++
				mu.Unlock()
				tt.handler(i, w)
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					mu.Lock()
					conns++
					mu.Unlock()
				}
			}
			srv.Start()
			defer srv.Close()
			addr := strings.TrimPrefix(srv.URL, "http://")
			c := &Client{Dial: dialer(addr)}
			defer c.CloseIdle()
			for i := range 3 {
				if i > 0 && tt.between != nil {
					tt.between(srv)
					time.Sleep(20 * time.Millisecond)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := c.Get(ctx, addr, "/", tt.readBody, 1<<20)
				cancel()
				if err != nil {
					t.Fatalf("GET %d: %v", i, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff([2]int{tt.wantConn, 3}, [2]int{conns, reqs}); diff != "" {
				t.Errorf("[connections, requests] (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClientClosesIdle: a kept connection is closed after IdleTimeout, so
// that a long-lived process (the sidecar) holds none it does not use.
func TestClientClosesIdle(t *testing.T) {
	closed := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			close(closed)
		}
	}
	srv.Start()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := &Client{Dial: dialer(addr)}
	if _, err := c.Get(context.Background(), addr, "/", false, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case <-closed:
		if d := time.Since(start); d < IdleTimeout/2 {
			t.Errorf("closed after %s, before the idle timeout %s", d, IdleTimeout)
		}
	case <-time.After(IdleTimeout + 5*time.Second):
		t.Fatalf("the kept connection is still open %s after its last use", IdleTimeout+5*time.Second)
	}
}

// TestClientHangsOnAKeptConnection: a server that stops answering on a
// kept connection is cut at the deadline, as a new one is.
func TestClientHangsOnAKeptConnection(t *testing.T) {
	var mu sync.Mutex
	hang := false
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		h := hang
		mu.Unlock()
		if h {
			<-release
		}
	}))
	// The handler returns before Close waits for it.
	defer srv.Close()
	defer close(release)
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := &Client{Dial: dialer(addr)}
	defer c.CloseIdle()
	if _, err := c.Get(context.Background(), addr, "/", false, 0); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	hang = true
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Get(ctx, addr, "/", false, 0); err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("GET on a kept connection to a hanging server = %v after %s", err, time.Since(start))
	}
}

// TestClientDoesNotKeep: answers a Client must not send another request
// after are still answers, but leave no connection kept: a body netready
// cannot read (without a judge), an interim 1xx answer whose final answer
// follows, and a chunked body whose trailer section never ends.
func TestClientDoesNotKeep(t *testing.T) {
	tests := []struct {
		name, answer string
		readBody     bool
		status       int
		body         string
	}{
		{"unknown transfer coding, headers only", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\nxx", false, 200, ""},
		{"bad Content-Length, headers only", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false, 200, ""},
		{"an interim answer", "HTTP/1.1 103 Early Hints\r\n\r\n|HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, 103, ""},
		{"a trailer cut short", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n", true, 200, "ok"},
	}
	for _, tt := range tests {
		addr := rawServer(t, tt.answer)
		c := &Client{Dial: dialer(addr)}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.Get(ctx, addr, "/", tt.readBody, 100)
		cancel()
		if err != nil || resp.StatusCode != tt.status || string(resp.Body) != tt.body {
			t.Errorf("%s: Get = %+v, %v; want %d %q", tt.name, resp, err, tt.status, tt.body)
		}
		if c.take() != nil {
			t.Errorf("%s: the connection was kept", tt.name)
		}
	}
}

// TestClientConcurrentGets: goroutines sharing a Client take turns on its
// one kept connection or open their own, and every GET is answered.
func TestClientConcurrentGets(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "{}") }))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := &Client{Dial: dialer(addr)}
	defer c.CloseIdle()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				resp, err := c.Get(context.Background(), addr, "/", true, 100)
				if err != nil || string(resp.Body) != "{}" {
					t.Errorf("Get = %+v, %v", resp, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
