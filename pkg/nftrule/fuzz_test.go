package nftrule

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzContainsToken: a token match is always a substring match, a text
// always matches itself, and gluing a letter to a letter-edged match
// breaks that occurrence.
func FuzzContainsToken(f *testing.F) {
	f.Add("-A X -s 10.1.0.50/32 -j ACCEPT", "10.1.0.5")
	f.Add(`comment "pod default/web-10"`, "default/web-1")
	f.Add("ip6 saddr fd00::5 accept", "fd00::5")
	f.Add("é", "")
	f.Fuzz(func(t *testing.T, text, match string) {
		got := ContainsToken(text, match)
		if got && !strings.Contains(text, match) {
			t.Fatalf("ContainsToken(%q, %q) without a substring", text, match)
		}
		if match != "" && !ContainsToken(match, match) {
			t.Fatalf("ContainsToken(%q, itself) = false", match)
		}
		first, _ := utf8.DecodeRuneInString(match)
		last, _ := utf8.DecodeLastRuneInString(match)
		if match != "" && !strings.ContainsAny(match, "q") && isTokenRune(first) && isTokenRune(last) &&
			ContainsToken("q"+match+"q", match) {
			t.Fatalf("ContainsToken(%q) matched inside a longer token", "q"+match+"q")
		}
	})
}
