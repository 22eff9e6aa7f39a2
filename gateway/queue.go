package gateway

import (
	"context"
	"errors"
	"strings"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// GetFunctionQueue counts the function's queued, running and held runs, per
// concurrency key. Key values come from runs' inputs and identities: a caller without
// runs:read sees them masked.
func (s *Server) GetFunctionQueue(ctx context.Context, req server.GetFunctionQueueRequestObject) (server.GetFunctionQueueResponseObject, error) {
	id := identity(ctx)
	var q *journal.FunctionQueue
	err := s.read(ctx, func(db *journal.TenantDB) error {
		if _, err := journal.GetFunction(ctx, db, id.Tenant, req.Name); err != nil {
			return err
		}
		var err error
		q, err = journal.GetFunctionQueue(ctx, db, id.Tenant, req.Name)
		return err
	})
	if errors.Is(err, journal.ErrNotFound) {
		return server.GetFunctionQueue404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: functionNotFound(req.Name)}, nil
	}
	if err != nil {
		return nil, err
	}
	reveal := id.Has(access.PermissionRunsRead)
	out := protocol.FunctionQueue{
		Function: req.Name, Queued: q.Queued, Running: q.Running, Held: q.Held,
		Keys:    make([]protocol.QueueKey, 0, len(q.Keys)),
		Reasons: make([]protocol.HeldReason, 0, len(q.Reasons)),
	}
	for _, k := range q.Keys {
		out.Keys = append(out.Keys, protocol.QueueKey{Key: maskKey(k.Key, reveal), Running: k.Running, Limit: k.Limit, Held: k.Held})
	}
	for _, r := range q.Reasons {
		out.Reasons = append(out.Reasons, protocol.HeldReason{Reason: maskReason(r.Reason, reveal), Runs: r.Runs})
	}
	return server.GetFunctionQueue200JSONResponse(out), nil
}

// maskKey hides a concurrency key's value unless reveal.
func maskKey(key string, reveal bool) string {
	if i := strings.Index(key, "="); i >= 0 && !reveal {
		return key[:i+1] + "…"
	}
	return key
}

// maskReason hides the key value a held reason names ("... of key
// input.customer_id=c-9 (limit 1)") unless reveal.
func maskReason(reason string, reveal bool) string {
	i := strings.Index(reason, "=")
	if reveal || i < 0 {
		return reason
	}
	if j := strings.LastIndex(reason, " ("); j > i {
		return reason[:i+1] + "…" + reason[j:]
	}
	return reason[:i+1] + "…"
}
