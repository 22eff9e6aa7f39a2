package stack

import (
	"testing"

	"go.uber.org/goleak"
)

// Main runs a test package that starts stacks, then fails it if a goroutine leaked. It
// ignores what idles by design after the stacks stopped: keep-alive connections of
// http.Clients and pgxpool's health check. Call it from TestMain.
func Main(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	)
}
