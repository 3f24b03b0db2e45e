// Command awsgen writes what ipamd v1.23.2 serves (its own types, its own
// metrics package) for netready's pool tests.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"time"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"
	"github.com/aws/amazon-vpc-cni-k8s/utils/prometheusmetrics"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var T = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func cidr(s string) net.IPNet { _, n, _ := net.ParseCIDR(s); return *n }

// addr: state "assigned", "cooling" (unassigned 5 s before T), "free" (unassigned 2 min before T)
func addr(ip, state string) *datastore.AddressInfo {
	a := &datastore.AddressInfo{Address: ip}
	switch state {
	case "assigned":
		// The introspection handler scrubs ContainerID and IfName.
		a.IPAMKey = datastore.IPAMKey{NetworkName: "aws-cni"}
		a.IPAMMetadata = datastore.IPAMMetadata{K8SPodNamespace: "default", K8SPodName: "web-" + ip, InterfacesCount: 1}
		a.AssignedTime = T.Add(-time.Hour)
	case "cooling":
		a.AssignedTime = T.Add(-time.Hour)
		a.UnassignedTime = T.Add(-5 * time.Second)
	case "free":
		a.AssignedTime = T.Add(-time.Hour)
		a.UnassignedTime = T.Add(-2 * time.Minute)
	}
	return a
}

// secondary: one /32 per address, as ipamd keeps secondary IPs.
func secondary(states map[string]string) map[string]*datastore.CidrInfo {
	out := map[string]*datastore.CidrInfo{}
	for ip, st := range states {
		c := &datastore.CidrInfo{Cidr: cidr(ip + "/32"), IPAddresses: map[string]*datastore.AddressInfo{}, AddressFamily: "4"}
		if st != "never" {
			c.IPAddresses[ip] = addr(ip, st)
		}
		out[ip+"/32"] = c
	}
	return out
}

func eni(id string, dev int, primary bool, cidrs map[string]*datastore.CidrInfo) datastore.ENI {
	return datastore.ENI{ID: id, IsPrimary: primary, DeviceNumber: dev, AvailableIPv4Cidrs: cidrs,
		IPv6Cidrs: map[string]*datastore.CidrInfo{}, RouteTableID: 2 + dev, SubnetID: "subnet-0123456789abcdef0"}
}

func infos(enis ...datastore.ENI) *datastore.ENIInfos {
	in := &datastore.ENIInfos{ENIs: map[string]datastore.ENI{}}
	for _, e := range enis {
		in.ENIs[e.ID] = e
		for _, c := range e.AvailableIPv4Cidrs {
			ones, bits := c.Cidr.Mask.Size()
			in.TotalIPs += 1 << (bits - ones)
			for _, a := range c.IPAddresses {
				if a.Assigned() {
					in.AssignedIPs++
				}
			}
		}
	}
	return in
}

func enisFile(name string, cards map[int]*datastore.ENIInfos) {
	data, err := json.Marshal(cards)
	if err != nil {
		panic(err)
	}
	os.WriteFile(name, data, 0o644)
}

func metricsFile(name string, set func()) {
	prometheusmetrics.PrometheusRegister()
	set()
	rec := httptest.NewRecorder()
	promhttp.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	os.WriteFile(name, rec.Body.Bytes(), 0o644)
}

func main() {
	out := os.Args[2]
	switch os.Args[1] {
	case "enis":
		// grows: 5 secondary IPs, 3 assigned, 1 cooling down, 1 free; the node takes 29.
		enisFile(out+"/enis-grows.json", map[int]*datastore.ENIInfos{0: infos(
			eni("eni-0a1b2c3d4e5f60001", 0, true, secondary(map[string]string{
				"10.0.1.10": "assigned", "10.0.1.11": "assigned", "10.0.1.12": "assigned", "10.0.1.13": "cooling", "10.0.1.14": "free"})))})
		// atmax: two ENIs of one secondary IP each (a t3.micro), both assigned.
		enisFile(out+"/enis-atmax.json", map[int]*datastore.ENIInfos{0: infos(
			eni("eni-0a1b2c3d4e5f60001", 0, true, secondary(map[string]string{"10.0.1.10": "assigned"})),
			eni("eni-0a1b2c3d4e5f60002", 1, false, secondary(map[string]string{"10.0.1.20": "assigned"})))})
		// cooldown: at the node's maximum, one assigned, one cooling down.
		enisFile(out+"/enis-cooldown.json", map[int]*datastore.ENIInfos{0: infos(
			eni("eni-0a1b2c3d4e5f60001", 0, true, secondary(map[string]string{"10.0.1.10": "assigned"})),
			eni("eni-0a1b2c3d4e5f60002", 1, false, secondary(map[string]string{"10.0.1.20": "cooling"})))})
		// pd: prefix delegation, one /28 with 3 assigned, 1 cooling; the rest never handed out.
		pd := map[string]*datastore.CidrInfo{"10.0.2.16/28": {Cidr: cidr("10.0.2.16/28"), IsPrefix: true, AddressFamily: "4",
			IPAddresses: map[string]*datastore.AddressInfo{"10.0.2.16": addr("10.0.2.16", "assigned"), "10.0.2.17": addr("10.0.2.17", "assigned"),
				"10.0.2.18": addr("10.0.2.18", "assigned"), "10.0.2.19": addr("10.0.2.19", "cooling"), "10.0.2.20": addr("10.0.2.20", "free")}}}
		enisFile(out+"/enis-pd.json", map[int]*datastore.ENIInfos{0: infos(eni("eni-0a1b2c3d4e5f60001", 0, true, pd))})
		// refused: 5 secondary IPs all assigned, far below the node's maximum.
		enisFile(out+"/enis-refused.json", map[int]*datastore.ENIInfos{0: infos(
			eni("eni-0a1b2c3d4e5f60001", 0, true, secondary(map[string]string{
				"10.0.1.10": "assigned", "10.0.1.11": "assigned", "10.0.1.12": "assigned", "10.0.1.13": "assigned", "10.0.1.14": "assigned"})))})
		// cards: two network cards, 3 addresses each, 5 assigned in all.
		enisFile(out+"/enis-cards.json", map[int]*datastore.ENIInfos{
			0: infos(eni("eni-0a1b2c3d4e5f60001", 0, true, secondary(map[string]string{"10.0.1.10": "assigned", "10.0.1.11": "assigned", "10.0.1.12": "assigned"}))),
			1: infos(eni("eni-0a1b2c3d4e5f60009", 0, false, secondary(map[string]string{"10.0.9.10": "assigned", "10.0.9.11": "assigned", "10.0.9.12": "free"}))),
		})
	case "metrics-grows":
		metricsFile(out, func() {
			prometheusmetrics.IpMax.Set(29)
			prometheusmetrics.EnisMax.Set(3)
			prometheusmetrics.Enis.Set(1)
			prometheusmetrics.TotalIPs.Set(5)
			prometheusmetrics.AssignedIPs.Set(3)
		})
	case "metrics-atmax":
		metricsFile(out, func() {
			prometheusmetrics.IpMax.Set(2)
			prometheusmetrics.EnisMax.Set(2)
			prometheusmetrics.Enis.Set(2)
			prometheusmetrics.TotalIPs.Set(2)
			prometheusmetrics.AssignedIPs.Set(2)
		})
	case "metrics-pd":
		metricsFile(out, func() {
			prometheusmetrics.IpMax.Set(432)
			prometheusmetrics.EnisMax.Set(3)
			prometheusmetrics.Enis.Set(1)
			prometheusmetrics.TotalIPs.Set(16)
			prometheusmetrics.AssignedIPs.Set(3)
			prometheusmetrics.TotalPrefixes.Set(1)
		})
	case "metrics-refused-before", "metrics-refused-after":
		n := 3.0
		if os.Args[1] == "metrics-refused-after" {
			n = 4
		}
		metricsFile(out, func() {
			prometheusmetrics.IpMax.Set(29)
			prometheusmetrics.EnisMax.Set(3)
			prometheusmetrics.Enis.Set(1)
			prometheusmetrics.TotalIPs.Set(5)
			prometheusmetrics.AssignedIPs.Set(5)
			prometheusmetrics.AwsAPIErr.WithLabelValues("AssignPrivateIpAddresses", "InsufficientFreeAddressesInSubnet").Add(n)
			prometheusmetrics.AwsAPIErr.WithLabelValues("GetLocalIPv4", "RequestLimitExceeded").Add(7)
			prometheusmetrics.IpamdErr.WithLabelValues("increaseIPPoolAllocIPAddressesFailed").Add(n)
		})
	default:
		fmt.Fprintln(os.Stderr, "unknown", os.Args[1])
		os.Exit(2)
	}
}
