package journal

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports whether err means that the database could not be reached, is
// shutting down or starting up, or takes no writes yet (a write on a standby, not
// promoted yet: read_only_sql_transaction), rather than that a statement failed: the
// same work may succeed once the database, or a new primary, is back. The gateway answers such errors with 503 and
// Retry-After, and retries the writes it owes (an invocation's answer, lease renewals).
// A context that ended is not an outage.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"): // connection exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // admin, crash shutdown; cannot connect now
			return true
		case pe.Code == "25006": // read_only_sql_transaction: a standby, until promoted
			return true
		}
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &ne) || pgconn.SafeToRetry(err)
}
