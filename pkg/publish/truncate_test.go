package publish

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncateKeepsCharactersWhole(t *testing.T) {
	for pad := range 4 {
		s := strings.Repeat("a", pad) + strings.Repeat("é", maxMessage)
		got := truncate(s)
		if len(got) > maxMessage || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") {
			t.Errorf("pad %d: %d bytes, valid UTF-8 %v, suffix %q; want at most %d valid bytes ending in ...", pad, len(got), utf8.ValidString(got), got[max(0, len(got)-3):], maxMessage)
		}
	}
	if got := truncate("short"); got != "short" {
		t.Errorf("truncate(short) = %q", got)
	}
}
