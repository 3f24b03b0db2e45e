package nftrule

import "testing"

func TestContainsToken(t *testing.T) {
	tests := []struct {
		text, match string
		want        bool
	}{
		{"-A NETREADY -s 10.1.0.5/32 -j ACCEPT", "10.1.0.5", true},
		{"-A NETREADY -s 10.1.0.50/32 -j ACCEPT", "10.1.0.5", false},
		{"-A NETREADY -s 10.1.0.50/32 -s 10.1.0.5/32", "10.1.0.5", true},
		{"ip saddr 10.1.0.5 accept", "10.1.0.5", true},
		{"ip saddr 10.1.0.50 accept", "10.1.0.5", false},
		{"ip saddr 110.1.0.5 accept", "10.1.0.5", false},
		{"10.1.0.5", "10.1.0.5", true},
		{`comment "pod default/web-1"`, "default/web-1", true},
		{`comment "pod default/web-10"`, "default/web-1", false},
		{`comment "pod default/web-1-x"`, "default/web-1", false},
		{"-m comment --comment web-1 -j ACCEPT", "web-1", true},
		{"ip6 saddr fd00::5 accept", "fd00::5", true},
		{"ip6 saddr fd00::50 accept", "fd00::5", false},
		{"ip6 saddr fd00::5:1 accept", "fd00::5", false},
		{"-s 10.1.0.5/32", "-s 10.1.0.5", true},
		{"-s 10.1.0.5/32", "/32", true}, // a punctuation edge is its own boundary
		{"x", "", false},
		{"pod_web-1", "web-1", false},
		{"é10.1.0.5", "10.1.0.5", false},
	}
	for _, tt := range tests {
		if got := ContainsToken(tt.text, tt.match); got != tt.want {
			t.Errorf("ContainsToken(%q, %q) = %v, want %v", tt.text, tt.match, got, tt.want)
		}
	}
}
