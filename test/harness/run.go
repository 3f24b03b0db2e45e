//go:build integration

package harness

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// RandomHex is n random bytes in hex, for names unique to a test.
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// MustRun runs a command and fails the test if it fails.
func MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Tail is the last lines of s.
func Tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// MountsUnder lists mount points below dir, deepest first.
func MountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// GrepLines is the lines of s that hold sub.
func GrepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// SyncBuffer is a bytes.Buffer safe for a process's output and a test
// reading it at once.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// CopyFile copies from to to with mode.
func CopyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, mode); err != nil {
		t.Fatal(err)
	}
}

// FreePort returns a loopback port that is free now, below the kernel's
// ephemeral range (32768 and up here): a port the kernel handed out for
// port 0 can be taken again, as the source port of any outgoing
// connection, before the server that was to listen on it binds it (etcd
// failed that way: "bind: address already in use").
func FreePort(t testing.TB) int {
	t.Helper()
	for range 1000 {
		port := 20000 + mathrand.IntN(12000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return 0
}

// ProcsMentioning lists processes whose command line mentions s (CRI-O's
// conmon runs with paths under CRI-O's root).
func ProcsMentioning(s string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		data, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(data), s) {
			out = append(out, pid)
		}
	}
	return out
}
