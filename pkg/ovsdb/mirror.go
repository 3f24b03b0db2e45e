package ovsdb

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
)

// Mirror is a table's rows as its monitor keeps them: the rows at the
// monitor's start, then each change the server sends, so reading them
// costs no request. Rows map row UUIDs to the monitored columns.
type Mirror struct {
	table   string
	columns []string
	mu      sync.Mutex
	rows    map[string]Row
	broken  bool          // an update could not be read, or the stream ended
	changed chan struct{} // a token per update; closed when the stream ends
}

// MirrorTable opens a monitor of table's columns and keeps its rows. It
// returns once the server has sent the rows, so every change made after it
// returns is seen. The mirror stops following the table when ctx ends,
// the connection fails or an update cannot be read: Rows then says so.
func MirrorTable(ctx context.Context, socket, database, table string, columns []string) (*Mirror, error) {
	m := &Mirror{table: table, columns: columns, rows: map[string]Row{}, changed: make(chan struct{}, 1)}
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
// "new" alone for a row inserted (or initial), both for one modified,
// "old" alone for one deleted.
type rowUpdate struct {
	Old Row `json:"old"`
	New Row `json:"new"`
}

// apply takes one table-updates object into the rows. One it cannot read
// breaks the mirror, and its error ends the stream: a row missed would be
// a chassis misjudged, or left out as gone.
func (m *Mirror) apply(tableUpdates json.RawMessage) error {
	var updates map[string]map[string]rowUpdate
	err := json.Unmarshal(tableUpdates, &updates)
	m.mu.Lock()
	for uuid, u := range updates[m.table] {
		if err != nil {
			break
		}
		err = m.applyRow(uuid, u)
	}
	if err != nil {
		m.broken = true
	}
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: an update that cannot be read: %w", m.table, err)
	}
	wake(m.changed)
	return nil
}

// applyRow takes one row's change; m.mu is held.
func (m *Mirror) applyRow(uuid string, u rowUpdate) error {
	switch {
	case u.New == nil && u.Old == nil:
		return fmt.Errorf("row %s: neither old nor new", uuid)
	case u.New == nil:
		delete(m.rows, uuid)
		return nil
	case u.Old != nil:
		// "monitor" sends every column in "new"; were it only the
		// changed ones, the others are kept.
		merged := maps.Clone(m.rows[uuid])
		if merged == nil {
			merged = Row{}
		}
		maps.Copy(merged, u.New)
		u.New = merged
	}
	for _, c := range m.columns {
		if _, ok := u.New[c]; !ok {
			return fmt.Errorf("row %s: no column %q", uuid, c)
		}
	}
	m.rows[uuid] = u.New
	return nil
}
