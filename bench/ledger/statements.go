package ledger

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Statement is one statement a connection sent to Postgres, as a [Tracer] saw it.
type Statement struct {
	// Name is the statement's sqlc name ("RunFinish", River's "JobGetAvailable"), or
	// for a statement without one its first word ("begin", "commit", "listen").
	Name string
	// Rows is how many rows it returned or changed (from its command tag); -1 when it
	// failed or is not known.
	Rows int64
	// RoundTrip is true for the first statement of an exchange with the server: a
	// statement sent alone, or the first of a batch (a batch is one round trip).
	RoundTrip bool
	// Tx is true when the statement began a transaction: a BEGIN, or a statement or
	// batch sent while its connection was in none (an implicit transaction).
	Tx bool
	// Conn numbers the connection that sent it (from 1, in the order the Tracer first
	// saw them), so that a transaction's statements can be told apart from others'.
	Conn int
}

// Tracer is a pgx tracer (pgx.QueryTracer, pgx.BatchTracer, pgx.CopyFromTracer) that
// records every statement its connections send, by name, so that a test can count what
// an operation cost rather than time it. It allocates nothing per statement once its
// log has grown to what a window needs (see [Tracer.Reset]), so that it does not change
// the allocations it sits beside. Statements that pgx prepares (the first use of a
// statement on a connection) are not recorded: they are a connection's, not an
// operation's, and which connection serves an operation is chance.
type Tracer struct {
	mu      sync.Mutex
	log     []Statement
	current map[*pgx.Conn]inFlight
	conns   map[*pgx.Conn]int
	open    atomic.Int32 // statements and batches sent and not yet answered
}

// NewTracer returns a Tracer whose log holds n statements before it grows.
func NewTracer(n int) *Tracer {
	return &Tracer{log: make([]Statement, 0, n), current: make(map[*pgx.Conn]inFlight, 64), conns: make(map[*pgx.Conn]int, 64)}
}

// Reset empties the log, keeping its room. Connections keep their numbers.
func (t *Tracer) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.log = t.log[:0]
	clear(t.current)
}

// Transactions groups statements (a log from [Tracer.Statements]) by transaction, in
// the order each began: a BEGIN with the statements its connection sent up to its
// COMMIT or ROLLBACK, a batch sent outside a transaction, or a statement sent alone
// outside one.
func Transactions(log []Statement) [][]Statement {
	var out [][]Statement
	open := map[int]int{}  // a connection's explicit transaction: its index in out
	batch := map[int]int{} // a connection's last exchange outside one: its index in out
	for _, s := range log {
		if i, ok := open[s.Conn]; ok {
			out[i] = append(out[i], s)
			if s.Name == "commit" || s.Name == "rollback" {
				delete(open, s.Conn)
			}
			continue
		}
		if i, ok := batch[s.Conn]; ok && !s.RoundTrip {
			out[i] = append(out[i], s) // the next statement of a batch
			continue
		}
		if s.Name == "begin" {
			open[s.Conn] = len(out)
		} else {
			batch[s.Conn] = len(out)
		}
		out = append(out, []Statement{s})
	}
	return out
}

// Statements returns a copy of the log since the last Reset.
func (t *Tracer) Statements() []Statement {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Statement(nil), t.log...)
}

// Open returns how many statements or batches have been sent and not yet answered.
func (t *Tracer) Open() int { return int(t.open.Load()) }

// inFlight is what a Tracer knows of a connection's exchange in flight.
type inFlight struct {
	index int  // the log index of its statement; -1 before a batch's first
	idle  bool // the connection was in no transaction when the batch was sent
}

// connID returns conn's number; t.mu is held.
func (t *Tracer) connID(conn *pgx.Conn) int {
	id, ok := t.conns[conn]
	if !ok {
		id = len(t.conns) + 1
		t.conns[conn] = id
	}
	return id
}

func (t *Tracer) start(conn *pgx.Conn, sql string) {
	s := Statement{Name: StatementName(sql), Rows: -1, RoundTrip: true}
	s.Tx = conn.PgConn().TxStatus() == 'I' && s.Name != "commit" && s.Name != "rollback"
	t.mu.Lock()
	s.Conn = t.connID(conn)
	t.current[conn] = inFlight{index: len(t.log)}
	t.log = append(t.log, s)
	t.mu.Unlock()
}

func (t *Tracer) end(conn *pgx.Conn, rows int64) {
	t.mu.Lock()
	if f, ok := t.current[conn]; ok && f.index >= 0 && f.index < len(t.log) {
		t.log[f.index].Rows = rows
	}
	t.mu.Unlock()
}

// rows returns the rows of a statement that succeeded, else -1.
func rows(err error, tag interface{ RowsAffected() int64 }) int64 {
	if err != nil {
		return -1
	}
	return tag.RowsAffected()
}

// TraceQueryStart records a statement sent alone: one round trip.
func (t *Tracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.open.Add(1)
	t.start(conn, d.SQL)
	return ctx
}

// TraceQueryEnd records how many rows the statement returned or changed.
func (t *Tracer) TraceQueryEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	t.end(conn, rows(d.Err, d.CommandTag))
	t.open.Add(-1)
}

// TraceBatchStart marks the start of a batch; its statements are recorded as they are
// read (TraceBatchQuery), the first as the batch's round trip.
func (t *Tracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.open.Add(1)
	t.mu.Lock()
	t.current[conn] = inFlight{index: -1, idle: conn.PgConn().TxStatus() == 'I'}
	t.mu.Unlock()
	return ctx
}

// TraceBatchQuery records one statement of a batch.
func (t *Tracer) TraceBatchQuery(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	s := Statement{Name: StatementName(d.SQL), Rows: rows(d.Err, d.CommandTag)}
	t.mu.Lock()
	s.Conn = t.connID(conn)
	if f := t.current[conn]; f.index < 0 {
		s.RoundTrip, s.Tx = true, f.idle
	}
	t.current[conn] = inFlight{index: len(t.log)}
	t.log = append(t.log, s)
	t.mu.Unlock()
}

// TraceBatchEnd ends the batch.
func (t *Tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) { t.open.Add(-1) }

// TraceCopyFromStart records a COPY FROM: one round trip.
func (t *Tracer) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	t.open.Add(1)
	t.start(conn, "copy")
	return ctx
}

// TraceCopyFromEnd records the rows copied.
func (t *Tracer) TraceCopyFromEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceCopyFromEndData) {
	t.end(conn, rows(d.Err, d.CommandTag))
	t.open.Add(-1)
}

// StatementName names a statement by its sqlc header ("-- name: RunFinish :one"), or
// else by its first word ("begin", "commit", "SELECT"). It allocates nothing.
func StatementName(sql string) string {
	s := strings.TrimLeft(sql, " \t\r\n")
	if rest, ok := strings.CutPrefix(s, "-- name: "); ok {
		if i := strings.IndexAny(rest, " \n"); i > 0 {
			return rest[:i]
		}
		return rest
	}
	for strings.HasPrefix(s, "--") || strings.HasPrefix(s, "/*") {
		end := "\n"
		if strings.HasPrefix(s, "/*") {
			end = "*/"
		}
		i := strings.Index(s, end)
		if i < 0 {
			return "comment"
		}
		s = strings.TrimLeft(s[i+len(end):], " \t\r\n")
	}
	i := strings.IndexFunc(s, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_') })
	if i < 0 {
		i = len(s)
	}
	word := s[:i]
	if word == "" {
		return "empty"
	}
	return word
}
