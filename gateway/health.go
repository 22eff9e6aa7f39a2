package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/migrations"
)

// Readyz answers 200 when this gateway can serve, else 503 naming every check that
// failed: the gateway drains, the database does not answer, the schema lacks
// migrations this build embeds (an upgrade rolled out before `stepgate migrate`), or
// River's client is not working jobs. Each check is bounded by 2s in all. It takes no
// token, so the database's errors go to the log, not into the detail.
func (s *Server) Readyz(ctx context.Context, _ server.ReadyzRequestObject) (server.ReadyzResponseObject, error) {
	var wrong []string
	if s.draining.Load() {
		wrong = append(wrong, "this gateway is shutting down: it finishes its invocations in flight and takes no new runs")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		s.log.WarnContext(ctx, "readyz: the database does not answer", slog.Any("error", err))
		wrong = append(wrong, "database unreachable")
	} else if pending, err := migrations.Pending(ctx, s.pool); err != nil {
		s.log.WarnContext(ctx, "readyz: the schema's version could not be read", slog.Any("error", err))
		wrong = append(wrong, "the schema's version could not be read")
	} else if len(pending) > 0 {
		wrong = append(wrong, "the database's schema is behind this build: "+migrationList(pending)+
			" not applied; run `stepgate migrate` (or restart a gateway, which migrates as it starts)")
	}
	if !s.inv.Status().Running {
		wrong = append(wrong, "River's client is not running: this gateway works no jobs")
	}
	if len(wrong) > 0 {
		return server.Readyz503ApplicationProblemPlusJSONResponse{UnavailableApplicationProblemPlusJSONResponse: server.UnavailableApplicationProblemPlusJSONResponse(
			problem(http.StatusServiceUnavailable, "not ready: "+strings.Join(wrong, "; ")))}, nil
	}
	return server.Readyz200JSONResponse{Status: "ok"}, nil
}

// migrationList names up to 5 of pending, and how many more.
func migrationList(pending []string) string {
	if len(pending) <= 5 {
		return strings.Join(pending, ", ")
	}
	return strings.Join(pending[:5], ", ") + " and " + strconv.Itoa(len(pending)-5) + " more"
}
