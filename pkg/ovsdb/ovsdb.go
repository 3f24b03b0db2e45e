// Package ovsdb owns talking to an OVSDB server (RFC 7047) on its unix
// socket: bounded JSON-RPC selects and transactions, a monitor whose
// updates only say that something changed, and a mirror of a table that a
// monitor keeps. It is the few calls netready needs, not a general client,
// which keeps the plugin small.
package ovsdb

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// maxAnswer bounds what one select reads; a monitor connection is closed
// after maxStream bytes, and its caller reads by select instead.
const (
	maxAnswer = 4 << 20
	maxStream = 64 << 20
)

// Row is one row, its columns as OVSDB encodes them.
type Row map[string]json.RawMessage

// message is a JSON-RPC 1.0 request, reply or notification.
type message struct {
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
	ID     json.RawMessage `json:"id"`
}

func dial(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("OVSDB at %s: %w", socket, err)
	}
	return conn, nil
}

// Select returns the rows of table that match where (OVSDB conditions,
// e.g. [["external_ids","includes",["map",[["sandbox","abc"]]]]]), with the
// given columns. It ends by ctx's deadline.
func Select(ctx context.Context, socket, database, table string, where []any, columns []string) ([]Row, error) {
	op := map[string]any{"op": "select", "table": table, "where": where, "columns": columns}
	result, err := transact(ctx, socket, database, op)
	if err != nil {
		return nil, err
	}
	var results []struct {
		Rows  []Row  `json:"rows"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(result, &results); err != nil || len(results) != 1 {
		return nil, fmt.Errorf("OVSDB at %s: unexpected answer %s", socket, result)
	}
	if results[0].Error != "" {
		return nil, fmt.Errorf("OVSDB at %s: %s", socket, results[0].Error)
	}
	return results[0].Rows, nil
}

// transact sends one transact request with ops on its own connection and
// returns the server's result, answering its echoes meanwhile. It ends by
// ctx's deadline.
func transact(ctx context.Context, socket, database string, ops ...any) (json.RawMessage, error) {
	conn, err := dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if err := send(conn, "transact", append([]any{database}, ops...), 1); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bufio.NewReader(io.LimitReader(conn, maxAnswer)))
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("OVSDB at %s: %w", socket, err)
		}
		if m.Method == "echo" {
			if err := reply(conn, m); err != nil {
				return nil, err
			}
			continue
		}
		if string(m.ID) != "1" {
			continue
		}
		if len(m.Error) > 0 && string(m.Error) != "null" {
			return nil, fmt.Errorf("OVSDB at %s: %s", socket, m.Error)
		}
		return m.Result, nil
	}
}

// monitorID names netready's monitor request and its reply.
const monitorID = "netready-monitor"

// monitorReply bounds the wait for the server's answer to the monitor
// request, whatever ctx allows: the stream itself lives as long as ctx.
const monitorReply = 5 * time.Second

// Monitor watches table's columns and sends a token on each update. It
// returns once the server has accepted the monitor, so every change made
// after it returns is seen. The channel closes when ctx ends or the
// connection fails.
func Monitor(ctx context.Context, socket, database, table string, columns []string) (<-chan struct{}, error) {
	out := make(chan struct{}, 1)
	note := func(json.RawMessage) error { wake(out); return nil }
	err := monitor(ctx, socket, database, table, columns, false, note, func() { close(out) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// monitor opens a monitor of table's columns and hands note each
// table-updates object the server sends: with initial, first the reply's
// (the rows at the monitor's start) before it returns, then each
// update's, from a goroutine that calls end once the stream ends (ctx,
// the connection, or an update note or monitor cannot read). end is not
// called when monitor returns an error.
func monitor(ctx context.Context, socket, database, table string, columns []string, initial bool, note func(json.RawMessage) error, end func()) error {
	conn, err := dial(ctx, socket)
	if err != nil {
		return err
	}
	req := map[string]any{table: map[string]any{"columns": columns, "select": map[string]bool{"initial": initial, "insert": true, "delete": true, "modify": true}}}
	if err := send(conn, "monitor", []any{database, nil, req}, monitorID); err != nil {
		conn.Close()
		return err
	}
	dec := json.NewDecoder(bufio.NewReader(io.LimitReader(conn, maxStream)))
	early := note
	if initial {
		// ovsdb-server answers before it sends any update; one that came
		// first would then be overwritten by the older initial rows.
		early = func(json.RawMessage) error { return errors.New("an update came before the reply") }
	}
	rows, err := awaitMonitorReply(ctx, conn, dec, early)
	if err == nil && initial {
		err = note(rows)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("OVSDB at %s: monitor %s.%s: %w", socket, database, table, err)
	}
	go func() {
		defer end()
		defer conn.Close()
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		defer stop()
		for {
			var m message
			if err := dec.Decode(&m); err != nil {
				return
			}
			if handleStream(conn, m, note) != nil {
				return
			}
		}
	}()
	return nil
}

// awaitMonitorReply reads until the server answers the monitor request,
// answering echoes (and noting updates) meanwhile, and returns the
// reply's table-updates.
func awaitMonitorReply(ctx context.Context, conn net.Conn, dec *json.Decoder, note func(json.RawMessage) error) (json.RawMessage, error) {
	conn.SetDeadline(time.Now().Add(monitorReply))
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("no answer: %w", err)
		}
		var id string
		if m.Method == "" && json.Unmarshal(m.ID, &id) == nil && id == monitorID {
			if len(m.Error) > 0 && string(m.Error) != "null" {
				return nil, fmt.Errorf("refused: %s", m.Error)
			}
			return m.Result, conn.SetDeadline(time.Time{})
		}
		if err := handleStream(conn, m, note); err != nil {
			return nil, err
		}
	}
}

// handleStream answers an echo or hands an update's table-updates to
// note; an error ends the stream. Only "update" comes: netready sends
// "monitor", never monitor_cond.
func handleStream(conn net.Conn, m message, note func(json.RawMessage) error) error {
	switch {
	case m.Method == "echo":
		return reply(conn, m)
	case m.Method == "update":
		// params: [the monitor's id (null here), table-updates]
		var params []json.RawMessage
		if json.Unmarshal(m.Params, &params) != nil || len(params) != 2 {
			return fmt.Errorf("an update that cannot be read: %.200s", m.Params)
		}
		return note(params[1])
	case len(m.Error) > 0 && string(m.Error) != "null":
		return fmt.Errorf("a request failed: %s", m.Error)
	}
	return nil
}

// wake sends a token on out unless one is already waiting.
func wake(out chan struct{}) {
	select {
	case out <- struct{}{}:
	default:
	}
}

func send(conn net.Conn, method string, params []any, id any) error {
	data, err := json.Marshal(map[string]any{"method": method, "params": params, "id": id})
	if err != nil {
		return err
	}
	if _, err := conn.Write(data); err != nil {
		return fmt.Errorf("OVSDB: %w", err)
	}
	return nil
}

// reply answers the server's echo, which keeps the session alive.
func reply(conn net.Conn, m message) error {
	data, _ := json.Marshal(map[string]any{"result": m.Params, "error": nil, "id": m.ID})
	if _, err := conn.Write(data); err != nil {
		return fmt.Errorf("OVSDB: %w", err)
	}
	return nil
}

// MapValue reads key from an OVSDB map column (["map", [[k, v], ...]]).
func MapValue(col json.RawMessage, key string) (string, bool) {
	var m []json.RawMessage
	if json.Unmarshal(col, &m) != nil || len(m) != 2 {
		return "", false
	}
	var kind string
	if json.Unmarshal(m[0], &kind) != nil || kind != "map" {
		return "", false
	}
	var pairs [][2]string
	if json.Unmarshal(m[1], &pairs) != nil {
		return "", false
	}
	for _, p := range pairs {
		if p[0] == key {
			return p[1], true
		}
	}
	return "", false
}
