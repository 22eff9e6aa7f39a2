package call

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"

	"github.com/stepgate/stepgate/journal"
)

// hide returns what the run shows of failure, the failure of the invocation t of a
// function outside the public internet (egress.Policy.Hide), that answered got: its HTTP
// status and size only, or that it could not be reached, whatever the reason (refused,
// reset, timed out, cut off), so that a tenant learns nothing of the operator's network
// from it but that nothing there answered its function's URL. The whole failure goes to
// the log. A refusal by the egress policy is shown as it is: no connection was made, and
// it names only the policy's rule.
func (c *Caller) hide(ctx context.Context, t Target, failure *journal.ErrorInfo, got reply) *journal.ErrorInfo {
	if got.refused {
		return failure
	}
	attrs := append(t.LogAttrs[:len(t.LogAttrs):len(t.LogAttrs)], slog.String("error_type", failure.Type), slog.String("error", failure.Message))
	c.Log.LogAttrs(ctx, slog.LevelWarn, "invocation of a function outside the public internet failed; its run shows the HTTP status and size only", attrs...)
	const why = "the function is not on the public internet, so its run does not show more; the gateway's log does"
	if got.status == 0 {
		return &journal.ErrorInfo{Type: ErrorTypeConnection, Message: "function could not be reached or did not answer (" + why + ")"}
	}
	size := fmt.Sprintf("%d bytes", got.size)
	if int64(got.size) > c.MaxAnswer {
		size = fmt.Sprintf("more than %d bytes", c.MaxAnswer)
	}
	if failure.Type == ErrorTypeHTTPStatus {
		return &journal.ErrorInfo{Type: failure.Type, Message: fmt.Sprintf("function answered HTTP %d with %s (%s)", got.status, size, why)}
	}
	return &journal.ErrorInfo{Type: failure.Type, Message: fmt.Sprintf("function answered HTTP %d with %s, which failed as %s (%s)", got.status, size, failure.Type, why)}
}

// Snippet returns the start of a function's answer for an error message: its first 300
// bytes, trimmed, as text that can be stored (valid UTF-8, no NUL), with "…" when cut
// there, or "(empty body)".
func Snippet(b []byte) string {
	if len(b) > 300 {
		b = b[:300]
	}
	s := strings.ReplaceAll(strings.ToValidUTF8(strings.TrimSpace(string(b)), "\uFFFD"), "\x00", "\uFFFD")
	if len(b) == 300 {
		s += "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}

// connectionError says why a request to a function got no answer, in words for the
// people reading the run.
func connectionError(err error) string {
	var dns *net.DNSError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		// (net.ErrClosed: a duplex request's body was still being written when the
		// function's close made the transport close its side.)
		return "the function closed the connection after accepting the request, without answering"
	case errors.Is(err, syscall.ECONNRESET):
		return "the function reset the connection before answering"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "could not connect to the function: connection refused (nothing listens at its registered URL)"
	case errors.As(err, &dns):
		return fmt.Sprintf("could not resolve the function's host %s: %s", dns.Name, dns.Err)
	}
	return "could not reach the function: " + trimErr(err)
}

// trimErr returns the message of the error err wraps, without err's own prefix (the
// *url.Error's method and URL, which may hold credentials), or err's when it wraps none.
func trimErr(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && ue.Unwrap() != nil {
		return ue.Unwrap().Error()
	}
	return err.Error()
}
