// Command netready-testagent behaves like a network plugin's node agent, for
// tests and benchmarks: it notices new pod interfaces on a bridge through
// netlink, waits a delay, then programs what a policy agent programs after
// CNI ADD has returned: a per-pod iptables rule, an nftables set element, a
// status file in Calico's endpoint-status format, and an HTTP readiness
// answer. It prints one JSON line per source when that programming becomes
// visible, and removes everything it made when it stops.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/netready/netready/pkg/checks"
)

type options struct {
	bridge, ipamDir, podsFile     string
	delay                         time.Duration
	chain, nftTable, nftSet       string
	calicoDir, httpAddr, unixSock string
}

// pod is what the test tells the agent about a container before its ADD,
// as a real agent learns it from the API server.
type pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Delay     string `json:"delay"`
}

type agent struct {
	opts options
	out  *json.Encoder
	ipt4 *iptables.IPTables
	ipt6 *iptables.IPTables

	mu         sync.Mutex
	outMu      sync.Mutex
	programmed map[string]bool // pod IPs
	scheduled  map[string]bool // container IDs
}

func main() { os.Exit(run()) }

func run() int {
	var o options
	flag.StringVar(&o.bridge, "bridge", "", "bridge whose new ports are pods")
	flag.StringVar(&o.ipamDir, "ipam-dir", "", "host-local dataDir/<network>: where pod IPs are found")
	flag.StringVar(&o.podsFile, "pods", "", "JSON {containerID: {namespace, name, delay}}")
	flag.DurationVar(&o.delay, "delay", 500*time.Millisecond, "delay before programming a pod without its own")
	flag.StringVar(&o.chain, "iptables-chain", "", "filter chain to program (created on first use)")
	flag.StringVar(&o.nftTable, "nft-table", "", "inet table to program (created on first use)")
	flag.StringVar(&o.nftSet, "nft-set", "pods", "set name prefix: <set>4 and <set>6")
	flag.StringVar(&o.calicoDir, "calico-dir", "", "Calico endpoint-status folder to write")
	flag.StringVar(&o.httpAddr, "http", "", "loopback address for GET /ready?ip=X")
	flag.StringVar(&o.unixSock, "unix", "", "unix socket for GET /ready?ip=X")
	flag.Parse()
	if o.bridge == "" || o.ipamDir == "" {
		fmt.Fprintln(os.Stderr, "testagent: --bridge and --ipam-dir are required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	a := &agent{opts: o, out: json.NewEncoder(os.Stdout), programmed: map[string]bool{}, scheduled: map[string]bool{}}
	if err := a.setup(); err != nil {
		fmt.Fprintln(os.Stderr, "testagent:", err)
		return 1
	}
	defer a.teardown()
	if err := a.serveHTTP(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "testagent:", err)
		return 1
	}
	if err := a.watchLinks(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "testagent:", err)
		return 1
	}
	a.emit(map[string]any{"event": "started"})
	<-ctx.Done()
	return 0
}

func (a *agent) setup() error {
	var err error
	if a.opts.chain != "" {
		if a.ipt4, err = iptables.New(iptables.IPFamily(iptables.ProtocolIPv4), iptables.Timeout(5)); err != nil {
			return err
		}
		if a.ipt6, err = iptables.New(iptables.IPFamily(iptables.ProtocolIPv6), iptables.Timeout(5)); err != nil {
			return err
		}
	}
	if a.opts.calicoDir != "" {
		return os.MkdirAll(a.opts.calicoDir, 0o755)
	}
	return nil
}

// teardown removes the chain, table and files the agent made.
func (a *agent) teardown() {
	if a.opts.chain != "" {
		for _, ipt := range []*iptables.IPTables{a.ipt4, a.ipt6} {
			if ok, _ := ipt.ChainExists("filter", a.opts.chain); ok {
				ipt.ClearAndDeleteChain("filter", a.opts.chain)
			}
		}
	}
	if a.opts.nftTable != "" {
		if c, err := nftables.New(); err == nil {
			c.DelTable(&nftables.Table{Name: a.opts.nftTable, Family: nftables.TableFamilyINet})
			c.Flush()
		}
	}
	if a.opts.calicoDir != "" {
		os.RemoveAll(a.opts.calicoDir)
	}
	if a.opts.unixSock != "" {
		os.Remove(a.opts.unixSock)
	}
}

func (a *agent) emit(v map[string]any) {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	a.out.Encode(v)
}

// watchLinks schedules programming whenever a port joins the bridge. A
// netlink stream can fail (ENOBUFS, EAGAIN); it is reopened, and a rescan
// catches pods whose events were lost.
func (a *agent) watchLinks(ctx context.Context) error {
	subscribe := func() (chan netlink.LinkUpdate, error) {
		ch := make(chan netlink.LinkUpdate, 1024)
		err := netlink.LinkSubscribeWithOptions(ch, ctx.Done(), netlink.LinkSubscribeOptions{ErrorCallback: func(err error) {
			if ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "testagent: link events:", err, "(resubscribing)")
			}
		}})
		return ch, err
	}
	ch, err := subscribe()
	if err != nil {
		return fmt.Errorf("subscribe to links: %w", err)
	}
	go func() {
		for {
			for u := range ch {
				if u.Header.Type != syscall.RTM_NEWLINK || u.Attrs().MasterIndex == 0 {
					continue
				}
				br, err := netlink.LinkByIndex(u.Attrs().MasterIndex)
				if err != nil || br.Attrs().Name != a.opts.bridge {
					continue
				}
				go a.programNew(ctx)
			}
			for ctx.Err() == nil {
				if ch, err = subscribe(); err == nil {
					go a.programNew(ctx)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return nil
}

// programNew finds the pods whose IPs host-local has handed out but that
// are not programmed, and programs each after its delay from when it found
// the allocation: a link event of another pod can start this search long
// before the allocation exists.
func (a *agent) programNew(ctx context.Context) {
	// host-local allocates just after the veth joins the bridge.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		found := false
		for ip, cid := range a.allocations() {
			a.mu.Lock()
			todo := !a.programmed[ip] && !a.scheduled[cid+"/"+ip]
			a.scheduled[cid+"/"+ip] = true
			a.mu.Unlock()
			if !todo {
				continue
			}
			found = true
			p := a.podInfo(cid)
			delay := a.opts.delay
			if d, err := time.ParseDuration(p.Delay); err == nil {
				delay = d
			}
			found := time.Now()
			go func() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(found.Add(delay))):
				}
				a.program(cid, ip, p)
			}()
		}
		if found {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// allocations reads host-local's files: one per IP, holding the container ID.
func (a *agent) allocations() map[string]string {
	out := map[string]string{}
	entries, _ := os.ReadDir(a.opts.ipamDir)
	for _, e := range entries {
		if net.ParseIP(e.Name()) == nil {
			continue
		}
		f, err := os.Open(filepath.Join(a.opts.ipamDir, e.Name()))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		if sc.Scan() {
			out[e.Name()] = strings.TrimSpace(sc.Text())
		}
		f.Close()
	}
	return out
}

func (a *agent) podInfo(cid string) pod {
	var pods map[string]pod
	if data, err := os.ReadFile(a.opts.podsFile); err == nil {
		json.Unmarshal(data, &pods)
	}
	return pods[cid]
}

// program makes every source show the pod, and reports when each became
// visible.
func (a *agent) program(cid, ipStr string, p pod) {
	ip := net.ParseIP(ipStr)
	began := time.Now()
	// A source becomes visible during its call: after beganAt, by visibleAt.
	report := func(source string, err error) {
		ev := map[string]any{"event": "programmed", "source": source, "ip": ipStr, "containerID": cid,
			"beganAt": began.UnixNano(), "visibleAt": time.Now().UnixNano()}
		began = time.Now()
		if err != nil {
			ev["error"] = err.Error()
		}
		a.emit(ev)
	}
	if a.opts.chain != "" {
		report("iptables", a.programIPTables(ip, cid))
	}
	if a.opts.nftTable != "" {
		report("nftables", a.programNFTables(ip))
	}
	if a.opts.calicoDir != "" && p.Name != "" {
		report("file", a.writeCalicoStatus(p, ip))
	}
	a.mu.Lock()
	a.programmed[ipStr] = true
	a.mu.Unlock()
	report("http", nil)
}

func (a *agent) programIPTables(ip net.IP, cid string) error {
	ipt, plen := a.ipt4, "/32"
	if ip.To4() == nil {
		ipt, plen = a.ipt6, "/128"
	}
	if ok, err := ipt.ChainExists("filter", a.opts.chain); err != nil {
		return err
	} else if !ok {
		if err := ipt.NewChain("filter", a.opts.chain); err != nil && !strings.Contains(err.Error(), "exists") {
			return err
		}
	}
	return ipt.Append("filter", a.opts.chain, "-s", ip.String()+plen, "-m", "comment", "--comment", "netready-testagent "+cid, "-j", "ACCEPT")
}

func (a *agent) programNFTables(ip net.IP) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Name: a.opts.nftTable, Family: nftables.TableFamilyINet})
	key, typ, name := ip.To4(), nftables.TypeIPAddr, a.opts.nftSet+"4"
	if key == nil {
		key, typ, name = ip.To16(), nftables.TypeIP6Addr, a.opts.nftSet+"6"
	}
	set := &nftables.Set{Table: t, Name: name, KeyType: typ}
	if err := c.AddSet(set, nil); err != nil {
		return err
	}
	if err := c.SetAddElements(set, []nftables.SetElement{{Key: key}}); err != nil {
		return err
	}
	return c.Flush()
}

// writeCalicoStatus writes the file Felix writes once an endpoint is
// programmed, atomically as Felix does, with content of the same shape.
func (a *agent) writeCalicoStatus(p pod, ip net.IP) error {
	name := checks.CalicoStatusFileName(p.Namespace, p.Name, "eth0")
	data, _ := json.Marshal(map[string]any{"ifaceName": "eth0", "ipv4Nets": []string{ip.String() + "/32"}, "profiles": []string{"kns." + p.Namespace}})
	tmp := filepath.Join(a.opts.calicoDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(a.opts.calicoDir, name))
}

// serveHTTP answers GET /ready?ip=X with 200 once X is programmed, 503
// before; GET /hang never answers, for deadline tests.
func (a *agent) serveHTTP(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		ok := a.programmed[r.URL.Query().Get("ip")]
		a.mu.Unlock()
		if !ok {
			http.Error(w, "not programmed", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-ctx.Done():
		}
	})
	var listeners []net.Listener
	if a.opts.httpAddr != "" {
		l, err := net.Listen("tcp", a.opts.httpAddr)
		if err != nil {
			return err
		}
		listeners = append(listeners, l)
	}
	if a.opts.unixSock != "" {
		os.Remove(a.opts.unixSock)
		l, err := net.Listen("unix", a.opts.unixSock)
		if err != nil {
			return err
		}
		listeners = append(listeners, l)
	}
	for _, l := range listeners {
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fmt.Fprintln(os.Stderr, "testagent: http:", err)
			}
		}()
		go func() { <-ctx.Done(); srv.Close() }()
	}
	return nil
}
