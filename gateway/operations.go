package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// CancelRuns starts a bulk cancel of the caller's tenant's runs matching the filter
// (see invoker.StartCancelOperation) and answers 202 with the operation at once.
func (s *Server) CancelRuns(ctx context.Context, req server.CancelRunsRequestObject) (server.CancelRunsResponseObject, error) {
	if req.Body == nil {
		return nil, badRequest("the body must be a filter")
	}
	filter, err := cancelFilter(*req.Body)
	if err != nil {
		return nil, err
	}
	id := identity(ctx)
	op, err := s.inv.StartCancelOperation(ctx, s.tenantDB(ctx), filter, id)
	var running *journal.RunningOperationError
	switch {
	case errors.As(err, &running):
		return server.CancelRuns409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			fmt.Sprintf("operation %s is still running; a tenant runs one bulk operation at a time", running.ID))}, nil
	case errors.Is(err, journal.ErrConflict):
		return server.CancelRuns409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			"another bulk operation was starting; ask again")}, nil
	case err != nil:
		return nil, err
	}
	s.log.InfoContext(ctx, "bulk cancel started", "operation_id", op.ID, "by", id.Subject)
	return server.CancelRuns202JSONResponse(operationToAPI(op)), nil
}

// GetOperation returns an operation of the caller's tenant.
func (s *Server) GetOperation(ctx context.Context, req server.GetOperationRequestObject) (server.GetOperationResponseObject, error) {
	db := s.tenantDB(ctx)
	op, err := journal.GetOperation(ctx, db, db.Tenant(), req.ID.String())
	if errors.Is(err, journal.ErrNotFound) {
		return server.GetOperation404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: server.NotFoundApplicationProblemPlusJSONResponse(
			problem(404, fmt.Sprintf("operation %s not found", req.ID)))}, nil
	}
	if err != nil {
		return nil, err
	}
	return server.GetOperation200JSONResponse(operationToAPI(op)), nil
}

// cancelFilter validates f: one criterion at least, statuses that have not finished,
// a well-formed function name and key prefix, a time range that is not empty.
func cancelFilter(f protocol.CancelFilter) (journal.CancelFilter, error) {
	out := journal.CancelFilter{Function: f.Function, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore, IdempotencyKeyPrefix: f.IdempotencyKeyPrefix}
	if f.Function == nil && f.Status == nil && f.CreatedAfter == nil && f.CreatedBefore == nil && f.IdempotencyKeyPrefix == nil {
		return out, badRequest("filter: give one criterion at least (function, status, created_after, created_before, idempotency_key_prefix)")
	}
	if f.Function != nil {
		if err := names.CheckFunction("function", *f.Function); err != nil {
			return out, badRequest("%v", err)
		}
	}
	if f.Status != nil {
		if len(*f.Status) == 0 || len(*f.Status) > 4 {
			return out, badRequest("status: give 1 to 4 of scheduled, queued, running, suspended")
		}
		for _, st := range *f.Status {
			switch journal.Status(st) {
			case journal.StatusScheduled, journal.StatusQueued, journal.StatusRunning, journal.StatusSuspended:
				out.Statuses = append(out.Statuses, journal.Status(st))
			default:
				return out, badRequest("status: %q is not one of scheduled, queued, running, suspended (a finished run cannot be cancelled)", st)
			}
		}
	}
	if p := f.IdempotencyKeyPrefix; p != nil && (len(*p) == 0 || len(*p) > 255) {
		return out, badRequest("idempotency_key_prefix: must be 1 to 255 bytes")
	}
	if f.CreatedAfter != nil && f.CreatedBefore != nil && !f.CreatedAfter.Before(*f.CreatedBefore) {
		return out, badRequest("created_after: must be before created_before")
	}
	return out, nil
}

func operationToAPI(op *journal.Operation) protocol.Operation {
	f := op.Filter
	o := protocol.Operation{
		ID: uuid.MustParse(op.ID), Kind: protocol.OperationKind(op.Kind), Status: protocol.OperationStatus(op.Status),
		Filter: protocol.CancelFilter{
			Function: f.Function, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore,
			IdempotencyKeyPrefix: f.IdempotencyKeyPrefix,
		},
		Cancelled: op.Cancelled, Matched: op.Matched, Batches: op.Batches, Error: op.Error,
		CreatedAt: op.CreatedAt, FinishedAt: op.FinishedAt, By: op.By,
	}
	if len(f.Statuses) > 0 {
		st := make([]protocol.RunStatus, len(f.Statuses))
		for i, s := range f.Statuses {
			st[i] = protocol.RunStatus(s)
		}
		o.Filter.Status = &st
	}
	return o
}
