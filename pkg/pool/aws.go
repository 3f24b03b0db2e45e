package pool

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/netready/netready/pkg/config"
)

// awsKind reads the AWS VPC CNI's ipamd: its introspection (/v1/enis) for
// the addresses it holds, and its metrics for the node's maximum.
//
// ipamd holds a warm pool (TotalIPs), not the node's capacity: it adds
// addresses while the pool runs low, up to the node's maximum. So a short
// pool is exhausted only when ipamd cannot grow it: it holds
// awscni_ip_max addresses already, or EC2 refused it more (the subnet has
// none left) within refusalWindow.
var awsKind = kind{
	typ:    config.IPAMAWS,
	plugin: "aws-cni",
	origin: Agent,
	advice: func(string, string) string {
		return "; ipamd is at the node's limit or the subnet is out of addresses: enable prefix delegation (ENABLE_PREFIX_DELEGATION), use an instance type with more addresses, or a subnet with free ones"
	},
	make: func(network string, ipam json.RawMessage) (Source, error) {
		var c config.AWSIPAM
		if err := config.StrictUnmarshal(ipam, &c); err != nil {
			return nil, fmt.Errorf("status ipam: %w", err)
		}
		if c.URL == "" {
			c.URL = config.DefaultAWSURL
		}
		if c.Metrics == "" {
			c.Metrics = config.DefaultAWSMetrics
		}
		intro, err := parseEndpoint(c.URL)
		if err != nil {
			return nil, fmt.Errorf("status ipam: url %w", err)
		}
		metrics, err := parseEndpoint(c.Metrics)
		if err != nil {
			return nil, fmt.Errorf("status ipam: metrics %w", err)
		}
		return &awsIPAMD{intro: intro, metrics: metrics, now: time.Now}, nil
	},
}

const (
	maxENIs    = 8 << 20
	maxMetrics = 4 << 20
	// ipamdCooldown is ipamd's IP_COOLDOWN_PERIOD by default: an address
	// released less long ago is not given out again. ipamd does not serve
	// the setting; a longer one makes netready count cooling addresses as
	// free.
	ipamdCooldown = 30 * time.Second
	// refusalWindow: after EC2 refuses addresses for want of them, ipamd
	// waits 2 minutes before it asks again (insufficientCidrErrorCooldown);
	// a refusal seen within this window, a little longer, still stands.
	refusalWindow = 3 * time.Minute
)

type awsIPAMD struct {
	intro, metrics endpoint
	now            func() time.Time
}

func (a *awsIPAMD) Type() string  { return config.IPAMAWS }
func (a *awsIPAMD) Where() string { return a.intro.raw + " " + a.metrics.raw }

func (a *awsIPAMD) Read(ctx context.Context, memo *Memo) (Count, error) {
	var (
		wg                  sync.WaitGroup
		enis, metrics       []byte
		enisErr, metricsErr error
	)
	wg.Add(2)
	go func() { defer wg.Done(); enis, enisErr = a.intro.get(ctx, a.intro.path+"/v1/enis", maxENIs) }()
	go func() { defer wg.Done(); metrics, metricsErr = a.metrics.get(ctx, a.metrics.path, maxMetrics) }()
	wg.Wait()
	now := a.now()
	if enisErr != nil {
		return Count{Unknown: "ipamd: " + enisErr.Error()}, nil
	}
	ranges, err := countENIs(enis, now)
	if err != nil {
		return Count{Unknown: "ipamd's /v1/enis: " + err.Error()}, nil
	}
	cnt := Count{Ranges: ranges}
	if metricsErr != nil {
		cnt.Unknown = "cannot tell whether ipamd can add addresses: " + metricsErr.Error()
		return cnt, nil
	}
	m, err := parseIPAMDMetrics(metrics)
	if err != nil {
		cnt.Unknown = "cannot tell whether ipamd can add addresses: its metrics: " + err.Error()
		return cnt, nil
	}
	if memo.Refusals != nil && m.refusals > *memo.Refusals {
		memo.RefusedAt = now
	}
	memo.Refusals = &m.refusals
	held := big.NewInt(0)
	for _, r := range ranges {
		if r.Set == "IPv4" {
			held = r.Usable
		}
	}
	atMax := held.Cmp(big.NewInt(int64(m.ipMax))) >= 0
	refused := !memo.RefusedAt.IsZero() && now.Sub(memo.RefusedAt) < refusalWindow
	cnt.Grows = !atMax && !refused
	said := fmt.Sprintf("ipamd holds %s addresses, the node takes at most %d (awscni_ip_max)", held, m.ipMax)
	if refused {
		said += fmt.Sprintf("; EC2 refused it more %s ago (InsufficientCidrBlocks or InsufficientFreeAddressesInSubnet)", now.Sub(memo.RefusedAt).Round(time.Second))
	}
	cnt.Said = said
	return cnt, nil
}

// ipamdENIInfos is ipamd's datastore.ENIInfos as /v1/enis serves it; only
// what netready reads.
type ipamdENIInfos struct {
	ENIs map[string]struct {
		IsExcludedForPodIPs bool
		AvailableIPv4Cidrs  map[string]ipamdCidr
		IPv6Cidrs           map[string]ipamdCidr
	}
}

// ipamdCidr is datastore.CidrInfo: a /32 per secondary address, or a
// prefix (/28 with prefix delegation) whose addresses ipamd lists only
// once it has handed them out.
type ipamdCidr struct {
	Cidr struct {
		IP   string
		Mask []byte // net.IPMask: base64 in JSON
	}
	IPAddresses map[string]struct {
		IPAMKey struct {
			NetworkName string `json:"networkName"`
			ContainerID string `json:"containerID"`
			IfName      string `json:"ifName"`
		}
		UnassignedTime time.Time
	}
}

// countENIs sums what ipamd holds over its network cards: since v1.20 the
// answer is keyed by network card; before, it is one card's object.
func countENIs(body []byte, now time.Time) ([]Range, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	var cards []ipamdENIInfos
	if _, ok := top["ENIs"]; ok {
		var one ipamdENIInfos
		if err := json.Unmarshal(body, &one); err != nil {
			return nil, err
		}
		cards = append(cards, one)
	} else {
		keys := make([]string, 0, len(top))
		for k := range top {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if _, err := strconv.Atoi(k); err != nil {
				return nil, fmt.Errorf("key %q is neither a network card nor ENIs: a format netready does not know", k)
			}
			var one ipamdENIInfos
			if err := json.Unmarshal(top[k], &one); err != nil {
				return nil, fmt.Errorf("network card %s: %v", k, err)
			}
			cards = append(cards, one)
		}
	}
	v4 := Range{Set: "IPv4", Usable: big.NewInt(0)}
	v6 := Range{Set: "IPv6", Usable: big.NewInt(0)}
	enis := 0
	for _, card := range cards {
		for _, eni := range card.ENIs {
			if eni.IsExcludedForPodIPs {
				continue
			}
			enis++
			for key, c := range eni.AvailableIPv4Cidrs {
				if err := addCidr(&v4, c, now); err != nil {
					return nil, fmt.Errorf("%s: %v", key, err)
				}
			}
			for key, c := range eni.IPv6Cidrs {
				if err := addCidr(&v6, c, now); err != nil {
					return nil, fmt.Errorf("%s: %v", key, err)
				}
			}
		}
	}
	if enis == 0 {
		return nil, errors.New("ipamd holds no ENI yet")
	}
	out := []Range{v4}
	if v6.Usable.Sign() > 0 {
		if v4.Usable.Sign() == 0 {
			out = nil // IPv6 mode
		}
		out = append(out, v6)
	}
	return out, nil
}

// addCidr counts one of ipamd's CIDRs into r: its size, its assigned
// addresses (a non-empty IPAMKey: v1.20+ scrubs the container ID and
// keeps the network name) and those cooling down.
func addCidr(r *Range, c ipamdCidr, now time.Time) error {
	ones, bits := net.IPMask(c.Cidr.Mask).Size()
	if bits == 0 || bits-ones > 64 {
		return fmt.Errorf("bad mask %v", c.Cidr.Mask)
	}
	r.Usable = new(big.Int).Add(r.Usable, new(big.Int).Lsh(big.NewInt(1), uint(bits-ones)))
	for _, addr := range c.IPAddresses {
		switch {
		case addr.IPAMKey.NetworkName != "" || addr.IPAMKey.ContainerID != "" || addr.IPAMKey.IfName != "":
			r.Used++
		case !addr.UnassignedTime.IsZero() && now.Sub(addr.UnassignedTime) <= ipamdCooldown:
			r.Cooling++
		}
	}
	return nil
}

// ipamdMetrics is what netready reads of ipamd's metrics.
type ipamdMetrics struct {
	ipMax    int64
	refusals float64
}

// parseIPAMDMetrics reads the Prometheus text format: awscni_ip_max, and
// the sum of awscni_aws_api_error_count for EC2's "no addresses left"
// errors.
func parseIPAMDMetrics(body []byte) (ipamdMetrics, error) {
	var m ipamdMetrics
	haveMax := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, ok := metricLine(line)
		if !ok {
			continue
		}
		switch name {
		case "awscni_ip_max":
			if value < 0 || value > 1<<40 {
				return m, fmt.Errorf("awscni_ip_max %v is out of range", value)
			}
			m.ipMax, haveMax = int64(value), true
		case "awscni_aws_api_error_count":
			if strings.Contains(labels, `error="InsufficientCidrBlocks"`) || strings.Contains(labels, `error="InsufficientFreeAddressesInSubnet"`) {
				m.refusals += value
			}
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if !haveMax || m.ipMax == 0 {
		return m, errors.New("no awscni_ip_max yet (ipamd sets it once it knows the instance type)")
	}
	return m, nil
}

// metricLine splits `name{labels} value [timestamp]`.
func metricLine(line string) (name, labels string, value float64, ok bool) {
	var rest string
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return "", "", 0, false
	} else if line[i] == '{' {
		end := strings.LastIndexByte(line, '}')
		if end < i {
			return "", "", 0, false
		}
		name, labels, rest = line[:i], line[i+1:end], line[end+1:]
	} else {
		name, rest = line[:i], line[i:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return name, labels, v, err == nil
}
