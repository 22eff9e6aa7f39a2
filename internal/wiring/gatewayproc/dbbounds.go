package gatewayproc

import (
	"context"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The bounds on the gateway's connections to the database, for a database that hangs
// instead of failing (a stopped primary, a cut link; docs/guarantees.md, "A database
// that hangs"):
//
//   - DefaultDatabaseTimeout: how long a statement of the gateway's pools waits for the
//     database's answer (Config.DatabaseTimeout, STEPGATE_DATABASE_TIMEOUT) before its
//     connection is closed and the statement fails as the database being out of reach
//     (an API request's then a 503 with Retry-After), and how long taking a connection
//     from a pool may take (its wait for a free one, a new one's connect, the ping of
//     one idle for a while);
//   - DefaultConnectTimeout: how long a new connection may take, when the URL sets no
//     connect_timeout;
//   - TCP keepalive probes after keepAliveIdle of silence, every keepAliveInterval,
//     keepAliveCount of them, and TCP_USER_TIMEOUT (Linux) of tcpUserTimeout: a
//     connection whose peer is gone (the machine lost, the network cut) is closed by the
//     kernel within ~20s, even an idle one, as the LISTEN connection mostly is.
const (
	DefaultDatabaseTimeout = 10 * time.Second
	DefaultConnectTimeout  = 5 * time.Second
	keepAliveIdle          = 5 * time.Second
	keepAliveInterval      = 5 * time.Second
	keepAliveCount         = 3
	tcpUserTimeout         = 20 * time.Second
)

// bounded returns a copy of pc with the bounds above: statement (0: the default) on
// each statement's wait for its answer, a connect timeout of connect unless pc has one, TCP
// keepalive and user timeout on its connections (through a dialer of its own, unless
// pc's connections are not TCP: a unix socket keeps pgx's dialer), and a ping's wait
// on a connection taken from the pool bounded by statement. Nil stays nil.
func bounded(pc *pgxpool.Config, statement, connect time.Duration) *pgxpool.Config {
	if pc == nil {
		return nil
	}
	if statement <= 0 {
		statement = DefaultDatabaseTimeout
	}
	c := pc.Copy()
	cc := c.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = connect
	}
	d := &net.Dialer{
		Timeout: cc.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount,
		},
		Control: setUserTimeout,
	}
	cc.DialFunc = d.DialContext
	c.PingTimeout = statement
	cc.Tracer = &answerBound{next: cc.Tracer, bound: statement}
	return c
}

// setUserTimeout sets TCP_USER_TIMEOUT on a TCP socket (Linux; elsewhere, see
// dbbounds_other.go): data sent and not acknowledged for that long closes the
// connection.
func setUserTimeout(network, _ string, rc syscall.RawConn) error {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil
	}
	var serr error
	err := rc.Control(func(fd uintptr) { serr = userTimeout(fd, tcpUserTimeout) })
	if err != nil {
		return err
	}
	return serr
}

// answerBound is a pgx tracer that bounds each statement's wait for the database's
// answer: it sets the connection's read deadline to bound from the statement's start
// (Query, QueryRow and Exec, a batch, a COPY) and clears it at its end. A
// statement that outlives it fails with a timeout, which closes its connection
// (journal.IsUnavailable: a net.Error). It passes every call on to next, when next
// traces that call.
type answerBound struct {
	next  any
	bound time.Duration
}

func (a *answerBound) arm(conn *pgx.Conn) {
	if nc := conn.PgConn().Conn(); nc != nil {
		_ = nc.SetReadDeadline(time.Now().Add(a.bound))
	}
}

func (a *answerBound) disarm(conn *pgx.Conn) {
	if nc := conn.PgConn().Conn(); nc != nil && !conn.PgConn().IsClosed() {
		_ = nc.SetReadDeadline(time.Time{})
	}
}

func (a *answerBound) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if t, ok := a.next.(pgx.QueryTracer); ok {
		ctx = t.TraceQueryStart(ctx, conn, data)
	}
	a.arm(conn)
	return ctx
}

func (a *answerBound) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	a.disarm(conn)
	if t, ok := a.next.(pgx.QueryTracer); ok {
		t.TraceQueryEnd(ctx, conn, data)
	}
}

func (a *answerBound) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if t, ok := a.next.(pgx.BatchTracer); ok {
		ctx = t.TraceBatchStart(ctx, conn, data)
	}
	a.arm(conn)
	return ctx
}

func (a *answerBound) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	if t, ok := a.next.(pgx.BatchTracer); ok {
		t.TraceBatchQuery(ctx, conn, data)
	}
}

func (a *answerBound) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	a.disarm(conn)
	if t, ok := a.next.(pgx.BatchTracer); ok {
		t.TraceBatchEnd(ctx, conn, data)
	}
}

func (a *answerBound) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	if t, ok := a.next.(pgx.CopyFromTracer); ok {
		ctx = t.TraceCopyFromStart(ctx, conn, data)
	}
	a.arm(conn)
	return ctx
}

func (a *answerBound) TraceCopyFromEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromEndData) {
	a.disarm(conn)
	if t, ok := a.next.(pgx.CopyFromTracer); ok {
		t.TraceCopyFromEnd(ctx, conn, data)
	}
}

func (a *answerBound) TracePrepareStart(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareStartData) context.Context {
	// Not armed: a Prepare comes within a statement's (Exec's, Query's, a batch's),
	// whose bound it must not clear at its end.
	if t, ok := a.next.(pgx.PrepareTracer); ok {
		ctx = t.TracePrepareStart(ctx, conn, data)
	}
	return ctx
}

func (a *answerBound) TracePrepareEnd(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareEndData) {
	if t, ok := a.next.(pgx.PrepareTracer); ok {
		t.TracePrepareEnd(ctx, conn, data)
	}
}

func (a *answerBound) TraceConnectStart(ctx context.Context, data pgx.TraceConnectStartData) context.Context {
	if t, ok := a.next.(pgx.ConnectTracer); ok {
		ctx = t.TraceConnectStart(ctx, data)
	}
	return ctx
}

func (a *answerBound) TraceConnectEnd(ctx context.Context, data pgx.TraceConnectEndData) {
	if t, ok := a.next.(pgx.ConnectTracer); ok {
		t.TraceConnectEnd(ctx, data)
	}
}

// acquireCancel is the context key of an Acquire's bound's cancel.
type acquireCancel struct{}

// TraceAcquireStart bounds the Acquire, including pgxpool's ping of a connection idle
// for a while (each, in turn, until one answers), by the bound: a pool whose connections
// all hang fails within it, with context.DeadlineExceeded (the API's 503).
func (a *answerBound) TraceAcquireStart(ctx context.Context, pool *pgxpool.Pool, data pgxpool.TraceAcquireStartData) context.Context {
	if t, ok := a.next.(pgxpool.AcquireTracer); ok {
		ctx = t.TraceAcquireStart(ctx, pool, data)
	}
	ctx, cancel := context.WithTimeout(ctx, a.bound)
	return context.WithValue(ctx, acquireCancel{}, cancel)
}

func (a *answerBound) TraceAcquireEnd(ctx context.Context, pool *pgxpool.Pool, data pgxpool.TraceAcquireEndData) {
	if cancel, ok := ctx.Value(acquireCancel{}).(context.CancelFunc); ok {
		cancel()
	}
	if t, ok := a.next.(pgxpool.AcquireTracer); ok {
		t.TraceAcquireEnd(ctx, pool, data)
	}
}

func (a *answerBound) TraceRelease(pool *pgxpool.Pool, data pgxpool.TraceReleaseData) {
	if t, ok := a.next.(pgxpool.ReleaseTracer); ok {
		t.TraceRelease(pool, data)
	}
}

var _ interface {
	pgx.QueryTracer
	pgx.BatchTracer
	pgx.CopyFromTracer
	pgx.PrepareTracer
	pgx.ConnectTracer
	pgxpool.AcquireTracer
	pgxpool.ReleaseTracer
} = (*answerBound)(nil)
