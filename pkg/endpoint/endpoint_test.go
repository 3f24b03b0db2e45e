package endpoint

import "testing"

func TestIsLoopbackHost(t *testing.T) {
	tests := map[string]bool{
		"localhost": true, "127.0.0.1": true, "127.255.0.9": true, "::1": true,
		"127.attacker.example": false, "localhost.": false, "LOCALHOST": false, "localhost.localdomain": false,
		"128.0.0.1": false, "10.0.0.1": false, "::ffff:127.0.0.1": false, "::1%lo": false, "127.1": false, "": false,
	}
	for host, want := range tests {
		if got := IsLoopbackHost(host); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
