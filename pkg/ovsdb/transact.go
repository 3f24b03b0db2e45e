package ovsdb

import (
	"context"
	"encoding/json"
	"fmt"
)

// OpResult is the server's answer to one operation of a transaction.
type OpResult struct {
	Rows  []Row  `json:"rows,omitempty"`
	Count int    `json:"count,omitempty"`
	Error string `json:"error,omitempty"`
}

// Transact runs ops (RFC 7047 operations, e.g. a "wait" then a "mutate")
// as one transaction and returns each operation's answer. The server runs
// them all or none: an operation that fails (a "wait" whose condition did
// not hold) carries its Error, and the ones after it did nothing. The error
// return is for a failure to ask or to read the answer. It ends by ctx's
// deadline.
func Transact(ctx context.Context, socket, database string, ops ...any) ([]OpResult, error) {
	result, err := transact(ctx, socket, database, ops...)
	if err != nil {
		return nil, err
	}
	// A failed transaction answers with one more result than ops when the
	// commit itself failed; a null marks an operation not run.
	var raw []json.RawMessage
	if err := json.Unmarshal(result, &raw); err != nil || len(raw) < len(ops) {
		return nil, fmt.Errorf("OVSDB at %s: unexpected answer %s", socket, result)
	}
	out := make([]OpResult, len(raw))
	for i, r := range raw {
		if string(r) == "null" {
			out[i].Error = "not run"
			continue
		}
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, fmt.Errorf("OVSDB at %s: unexpected answer %s", socket, result)
		}
	}
	return out, nil
}

// Int reads an OVSDB integer column.
func Int(col json.RawMessage) (int64, bool) {
	var v int64
	if json.Unmarshal(col, &v) != nil {
		return 0, false
	}
	return v, true
}
