package atomicfile

import "testing"

func TestTempTarget(t *testing.T) {
	tests := []struct {
		name, want string
		ok         bool
	}{
		{".tmp-a_eth0.json.123", "a_eth0.json", true},
		{".tmp-.pool.987654", ".pool", true},
		// An interface name may hold dots: the random suffix is the last part.
		{".tmp-a_eth0.json.x.json.42", "a_eth0.json.x.json", true},
		{"a_eth0.json", "", false},
		{".tmp-nodot", "", false},
		{".tmp-.5", "", false},
	}
	for _, tt := range tests {
		got, ok := TempTarget(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("TempTarget(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
