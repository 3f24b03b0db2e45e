// Command awsgenold writes what ipamd v1.19.6 serves at /v1/enis (the
// datastore's ENIInfos, one network card, not keyed), with its own types.
package main

import (
	"encoding/json"
	"net"
	"os"
	"time"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"
)

var T = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func main() {
	c := map[string]*datastore.CidrInfo{}
	for ip, st := range map[string]string{"10.0.1.10": "assigned", "10.0.1.11": "assigned", "10.0.1.12": "assigned", "10.0.1.13": "cooling", "10.0.1.14": "free"} {
		_, n, _ := net.ParseCIDR(ip + "/32")
		a := &datastore.AddressInfo{Address: ip, AssignedTime: T.Add(-time.Hour)}
		switch st {
		case "assigned":
			// v1.19 serves the whole key.
			a.IPAMKey = datastore.IPAMKey{NetworkName: "aws-cni", ContainerID: "4f2c0d1e9a7b" + ip, IfName: "eth0"}
			a.IPAMMetadata = datastore.IPAMMetadata{K8SPodNamespace: "default", K8SPodName: "web-" + ip}
		case "cooling":
			a.UnassignedTime = T.Add(-5 * time.Second)
		case "free":
			a.UnassignedTime = T.Add(-2 * time.Minute)
		}
		c[ip+"/32"] = &datastore.CidrInfo{Cidr: *n, IPAddresses: map[string]*datastore.AddressInfo{ip: a}, AddressFamily: "4"}
	}
	in := datastore.ENIInfos{TotalIPs: 5, AssignedIPs: 3, ENIs: map[string]datastore.ENI{
		"eni-0a1b2c3d4e5f60001": {ID: "eni-0a1b2c3d4e5f60001", IsPrimary: true, AvailableIPv4Cidrs: c, IPv6Cidrs: map[string]*datastore.CidrInfo{}}}}
	data, err := json.Marshal(&in)
	if err != nil {
		panic(err)
	}
	os.WriteFile(os.Args[1], data, 0o644)
}
