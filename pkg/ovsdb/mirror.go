package ovsdb

import (
	"context"
	"encoding/json"
	"sync"
)

// Mirror is a table's rows as its monitor keeps them: the rows at the
// monitor's start, then each change the server sends, so reading them
// costs no request. Rows map row UUIDs to the monitored columns.
type Mirror struct {
	table   string
	mu      sync.Mutex
	rows    map[string]Row
	broken  bool          // an update could not be read, or the stream ended
	changed chan struct{} // a token per update; closed when the stream ends
}

// MirrorTable opens a monitor of table's columns and keeps its rows. It
// returns once the server has sent the rows, so every change made after it
// returns is seen. The mirror stops following the table when ctx ends or
// the connection fails: Rows then says so.
func MirrorTable(ctx context.Context, socket, database, table string, columns []string) (*Mirror, error) {
	m := &Mirror{table: table, rows: map[string]Row{}, changed: make(chan struct{}, 1)}
	end := func() {
		m.mu.Lock()
		m.broken = true
		m.mu.Unlock()
		close(m.changed)
	}
	if err := monitor(ctx, socket, database, table, columns, true, m.apply, end); err != nil {
		return nil, err
	}
	return m, nil
}

// Rows returns the rows, and false once the mirror no longer follows the
// table: the caller reads the table itself then.
func (m *Mirror) Rows() ([]Row, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.broken {
		return nil, false
	}
	// Rows are replaced whole, never changed, so sharing them is safe.
	out := make([]Row, 0, len(m.rows))
	for _, r := range m.rows {
		out = append(out, r)
	}
	return out, true
}

// Changed receives a token after each update is applied, and is closed
// when the mirror stops following the table.
func (m *Mirror) Changed() <-chan struct{} { return m.changed }

// rowUpdate is one row's change in a "monitor" update (RFC 7047 4.1.6):
// "new" holds every monitored column, and is absent for a deleted row.
type rowUpdate struct {
	New Row `json:"new"`
}

// apply takes one table-updates object into the rows. One it cannot read
// breaks the mirror: a row missed would be a row misjudged.
func (m *Mirror) apply(tableUpdates json.RawMessage) {
	var updates map[string]map[string]rowUpdate
	err := json.Unmarshal(tableUpdates, &updates)
	m.mu.Lock()
	if err != nil {
		m.broken = true
	}
	for uuid, u := range updates[m.table] {
		if u.New == nil {
			delete(m.rows, uuid)
			continue
		}
		m.rows[uuid] = u.New
	}
	m.mu.Unlock()
	wake(m.changed) // broken too: the reader learns it at once
}
