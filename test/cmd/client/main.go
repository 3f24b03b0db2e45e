// Command client is the first-packet test's workload, the only process of
// a scratch image: as its very first action it opens one TCP connection,
// with no retry of its own, to $TARGET, and reports the result in its
// termination message ("connected in 1.2ms, started 1764031188123" or
// "failed after 2s: ..., started ...", the start in Unix milliseconds).
// It exits 0 when it connected and 1 when not, unless $STAY is set: then
// it stays running (so that the pod can be Ready) until stopped.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	start := time.Now()
	timeout := 2 * time.Second
	if d, err := time.ParseDuration(os.Getenv("TIMEOUT")); err == nil {
		timeout = d
	}
	conn, err := net.DialTimeout("tcp", os.Getenv("TARGET"), timeout)
	msg, code := fmt.Sprintf("connected in %s", time.Since(start).Round(time.Microsecond)), 0
	if err != nil {
		msg, code = fmt.Sprintf("failed after %s: %v", time.Since(start).Round(time.Millisecond), err), 1
	} else {
		conn.Close()
	}
	msg += fmt.Sprintf(", started %d", start.UnixMilli())
	os.WriteFile("/dev/termination-log", []byte(msg), 0o644)
	fmt.Println(msg)
	if os.Getenv("STAY") != "" {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
		code = 0
	}
	os.Exit(code)
}
