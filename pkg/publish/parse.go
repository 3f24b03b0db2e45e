package publish

import (
	"regexp"
	"strconv"
	"strings"
)

// Attachment is what a condition message says of one attachment, for
// readers that have only the API (kubectl netready).
type Attachment struct {
	Network    string `json:"network"`
	IfName     string `json:"ifName"`
	Programmed bool   `json:"programmed"`
	// WaitedMs is how long ADD (or the re-check) waited, when programmed.
	WaitedMs int64 `json:"waitedMs,omitempty"`
	// Late is set once the attachment has been pending past the sidecar's
	// --pending-timeout; it names that time and ADD's.
	Late string `json:"late,omitempty"`
	// Unmet lists the unmet checks with why, as ForMarkers writes them.
	Unmet string `json:"unmet,omitempty"`
}

// attachmentStart matches the start of each part ForMarkers writes.
var attachmentStart = regexp.MustCompile(`(?:^|; )network (\S+) \(([^()\s]+)\)(?:: | programmed after (\d+) ms)`)

// sandboxPrefix matches the sandbox ForMarkers names first.
var sandboxPrefix = regexp.MustCompile(`^sandbox (\S+); `)

// ParseSandbox returns the sandbox (short) IDs a ForMarkers message was
// judged on, or "", for readers that have only the API.
func ParseSandbox(msg string) string {
	if m := sandboxPrefix.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return ""
}

// ParseMessage reads back the attachments of a condition message that
// ForMarkers (or WithUnreadable, after its own parts) wrote. Text it does
// not know is skipped.
func ParseMessage(msg string) []Attachment {
	locs := attachmentStart.FindAllStringSubmatchIndex(msg, -1)
	var out []Attachment
	for i, loc := range locs {
		end := len(msg)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		a := Attachment{Network: msg[loc[2]:loc[3]], IfName: msg[loc[4]:loc[5]]}
		if loc[6] >= 0 {
			a.Programmed = true
			a.WaitedMs, _ = strconv.ParseInt(msg[loc[6]:loc[7]], 10, 64)
			out = append(out, a)
			continue
		}
		rest := msg[loc[1]:end]
		if before, after, ok := strings.Cut(rest, " waiting for: "); ok {
			a.Late = strings.TrimSuffix(strings.TrimSpace(before), ";")
			a.Unmet = after
		} else if after, ok := strings.CutPrefix(rest, "waiting for: "); ok {
			a.Unmet = after
		}
		out = append(out, a)
	}
	return out
}
