package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/operation"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// CancelRuns starts a bulk cancel of the caller's tenant's runs matching the filter
// (see invoker.Operations.StartCancel) and answers 202 with the operation at once.
func (s *Server) CancelRuns(ctx context.Context, req server.CancelRunsRequestObject) (server.CancelRunsResponseObject, error) {
	if req.Body == nil {
		return nil, badRequest("the body must be a filter")
	}
	filter, err := cancelFilter(*req.Body)
	if err != nil {
		return nil, err
	}
	id := identity(ctx)
	op, err := s.inv.Operations().StartCancel(ctx, s.tenantDB(ctx), filter, id)
	var running *operation.RunningOperationError
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

// RerunRuns starts a bulk rerun (a redrive) of the caller's tenant's finished runs
// matching the filter (see invoker.Operations.StartRerun) and answers 202 with the
// operation at once. Besides the operation's runs:invoke, the caller needs runs:manage,
// as for a bulk cancel.
func (s *Server) RerunRuns(ctx context.Context, req server.RerunRunsRequestObject) (server.RerunRunsResponseObject, error) {
	id := identity(ctx)
	if !id.Has(access.PermissionRunsManage) {
		return nil, &problemError{http.StatusForbidden, fmt.Sprintf(
			"a bulk rerun needs the %s permission besides %s; the token's roles (%s) do not grant it",
			access.PermissionRunsManage, access.PermissionRunsInvoke, access.RoleList(id.Roles))}
	}
	if req.Body == nil {
		return nil, badRequest("the body must be {\"filter\": {...}, \"from\": \"start\"|\"failure\"} or with \"from_seq\"")
	}
	filter, err := rerunFilter(req.Body.Filter)
	if err != nil {
		return nil, err
	}
	var opts operation.RerunOptions
	switch {
	case req.Body.From != nil && req.Body.FromSeq != nil:
		return nil, badRequest("from: give from or from_seq, not both")
	case req.Body.FromSeq != nil:
		if *req.Body.FromSeq < 1 {
			return nil, badRequest("from_seq: must be 1 or more; got %d", *req.Body.FromSeq)
		}
		opts.FromSeq = req.Body.FromSeq
	case req.Body.From != nil:
		switch *req.Body.From {
		case protocol.RerunRunsRequestFromStart, protocol.RerunRunsRequestFromFailure:
			opts.From = string(*req.Body.From)
		default:
			return nil, badRequest("from: %q is not start or failure", *req.Body.From)
		}
	default:
		opts.From = operation.RerunFromStart
	}
	op, err := s.inv.Operations().StartRerun(ctx, s.tenantDB(ctx), filter, opts, id)
	var running *operation.RunningOperationError
	switch {
	case errors.As(err, &running):
		return server.RerunRuns409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			fmt.Sprintf("operation %s is still running; a tenant runs one bulk operation at a time", running.ID))}, nil
	case errors.Is(err, journal.ErrConflict):
		return server.RerunRuns409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			"another bulk operation was starting; ask again")}, nil
	case err != nil:
		return nil, err
	}
	s.log.InfoContext(ctx, "bulk rerun started", "operation_id", op.ID, "by", id.Subject)
	return server.RerunRuns202JSONResponse(operationToAPI(op)), nil
}

// CancelOperation stops a running operation of the caller's tenant.
func (s *Server) CancelOperation(ctx context.Context, req server.CancelOperationRequestObject) (server.CancelOperationResponseObject, error) {
	id := identity(ctx)
	op, err := s.inv.Operations().Cancel(ctx, s.tenantDB(ctx), req.ID.String(), id)
	var finished *operation.FinishedOperationError
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return server.CancelOperation404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: server.NotFoundApplicationProblemPlusJSONResponse(
			problem(404, fmt.Sprintf("operation %s not found", req.ID)))}, nil
	case errors.As(err, &finished):
		return server.CancelOperation409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			fmt.Sprintf("operation %s is already %s; only a running operation can be cancelled", req.ID, finished.Status))}, nil
	case err != nil:
		return nil, err
	}
	s.log.InfoContext(ctx, "operation cancelled", "operation_id", op.ID, "by", id.Subject)
	return server.CancelOperation200JSONResponse(operationToAPI(op)), nil
}

// GetOperation returns an operation of the caller's tenant.
func (s *Server) GetOperation(ctx context.Context, req server.GetOperationRequestObject) (server.GetOperationResponseObject, error) {
	db := s.tenantDB(ctx)
	op, err := operation.GetOperation(ctx, db, db.Tenant(), req.ID.String())
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
// a well-formed function name, a key prefix of text Postgres stores, a time range that
// is not empty.
func cancelFilter(f protocol.CancelFilter) (operation.CancelFilter, error) {
	out := operation.CancelFilter{Function: f.Function, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore, IdempotencyKeyPrefix: f.IdempotencyKeyPrefix}
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
	if f.ErrorType != nil || f.ErrorGroup != nil {
		return out, badRequest("filter: error_type and error_group select finished runs, which a cancel cannot cancel")
	}
	return out, checkFilterCommon("", f)
}

// errorGroupKey is the form of stepgate.error_group: 16 hex digits.
var errorGroupKey = regexp.MustCompile(`^[0-9a-f]{16}$`)

// rerunFilter validates f for a bulk rerun: one criterion at least, statuses that have
// finished, a well-formed function name and error group, a key prefix and error type of
// text Postgres stores, a time range that is not empty.
func rerunFilter(f protocol.CancelFilter) (operation.CancelFilter, error) {
	out := operation.CancelFilter{
		Function: f.Function, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore, IdempotencyKeyPrefix: f.IdempotencyKeyPrefix,
		ErrorType: f.ErrorType, ErrorGroup: f.ErrorGroup,
	}
	if f.Function == nil && f.Status == nil && f.CreatedAfter == nil && f.CreatedBefore == nil && f.IdempotencyKeyPrefix == nil &&
		f.ErrorType == nil && f.ErrorGroup == nil {
		return out, badRequest("filter: give one criterion at least (function, status, created_after, created_before, idempotency_key_prefix, error_type, error_group)")
	}
	if f.Function != nil {
		if err := names.CheckFunction("filter.function", *f.Function); err != nil {
			return out, badRequest("%v", err)
		}
	}
	if f.Status != nil {
		if len(*f.Status) == 0 || len(*f.Status) > 3 {
			return out, badRequest("filter.status: give 1 to 3 of completed, failed, cancelled")
		}
		for _, st := range *f.Status {
			switch journal.Status(st) {
			case journal.StatusCompleted, journal.StatusFailed, journal.StatusCancelled:
				out.Statuses = append(out.Statuses, journal.Status(st))
			default:
				return out, badRequest("filter.status: %q is not one of completed, failed, cancelled (only a finished run can be rerun)", st)
			}
		}
	} else {
		// A redrive: without a status, the failed runs only, never every completed run.
		out.Statuses = []journal.Status{journal.StatusFailed}
	}
	if t := f.ErrorType; t != nil {
		if len(*t) == 0 || len(*t) > 255 {
			return out, badRequest("filter.error_type: must be 1 to 255 bytes")
		}
		if err := checkText("filter.error_type", *t); err != nil {
			return out, err
		}
	}
	if g := f.ErrorGroup; g != nil && !errorGroupKey.MatchString(*g) {
		return out, badRequest("filter.error_group: must be a group's key, 16 hex digits (see GET /v1/failures); got %q", *g)
	}
	return out, checkFilterCommon("filter.", f)
}

// checkFilterCommon checks the bounds a cancel's and a rerun's filters share: a key
// prefix of 1 to 255 bytes of text Postgres stores, a time range that is not empty. Its
// errors name each field after at ("" or "filter.").
func checkFilterCommon(at string, f protocol.CancelFilter) error {
	if p := f.IdempotencyKeyPrefix; p != nil {
		if len(*p) == 0 || len(*p) > 255 {
			return badRequest("%sidempotency_key_prefix: must be 1 to 255 bytes", at)
		}
		if err := checkText(at+"idempotency_key_prefix", *p); err != nil {
			return err
		}
	}
	if f.CreatedAfter != nil && f.CreatedBefore != nil && !f.CreatedAfter.Before(*f.CreatedBefore) {
		return badRequest("%screated_after: must be before created_before", at)
	}
	return nil
}

func operationToAPI(op *operation.Operation) protocol.Operation {
	f := op.Filter
	o := protocol.Operation{
		ID: uuid.MustParse(op.ID), Kind: protocol.OperationKind(op.Kind), Status: protocol.OperationStatus(op.Status),
		Filter: protocol.CancelFilter{
			Function: f.Function, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore,
			IdempotencyKeyPrefix: f.IdempotencyKeyPrefix, ErrorType: f.ErrorType, ErrorGroup: f.ErrorGroup,
		},
		Done: op.Cancelled, Failed: op.Failed, Matched: op.Matched, Batches: op.Batches, Error: op.Error,
		CreatedAt: op.CreatedAt, FinishedAt: op.FinishedAt, By: op.By, CancelledBy: op.CancelledBy,
	}
	if op.Kind == operation.OperationKindCancel {
		o.Cancelled = op.Cancelled
	} else {
		o.FromSeq = op.Options.FromSeq
		if op.Options.FromSeq == nil {
			from := protocol.OperationFrom(cmp.Or(op.Options.From, operation.RerunFromStart))
			o.From = &from
		}
	}
	if len(op.Errors) > 0 {
		errs := make([]protocol.OperationError, len(op.Errors))
		for i, e := range op.Errors {
			errs[i] = protocol.OperationError{RunID: e.RunID, Error: e.Error}
		}
		o.Errors = &errs
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
