package nftrule

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// ContainsToken reports whether match occurs in text at token boundaries,
// so that "10.1.0.5" never matches a rule for 10.1.0.50, nor "web-1" one
// for web-10. Token characters are letters, digits, '.', ':', '-' and '_'.
// Where match itself starts (or ends) with a token character, the
// character before (after) the occurrence must not be one, or be the start
// (end) of text; a match edge that is punctuation is its own boundary.
func ContainsToken(text, match string) bool {
	if match == "" {
		return false
	}
	first, _ := utf8.DecodeRuneInString(match)
	last, _ := utf8.DecodeLastRuneInString(match)
	for from := 0; from <= len(text)-len(match); {
		i := strings.Index(text[from:], match)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(match)
		before, _ := utf8.DecodeLastRuneInString(text[:i])
		after, _ := utf8.DecodeRuneInString(text[end:])
		okBefore := i == 0 || !isTokenRune(first) || !isTokenRune(before)
		okAfter := end == len(text) || !isTokenRune(last) || !isTokenRune(after)
		if okBefore && okAfter {
			return true
		}
		_, size := utf8.DecodeRuneInString(text[i:])
		from = i + size
	}
	return false
}

func isTokenRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == ':' || r == '-' || r == '_'
}
