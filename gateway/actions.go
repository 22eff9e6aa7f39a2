package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
)

// CancelRun cancels a run of the caller's tenant that has not finished (see
// invoker.CancelRun), with its children that were not started detached.
func (s *Server) CancelRun(ctx context.Context, req server.CancelRunRequestObject) (server.CancelRunResponseObject, error) {
	if !validRunID(req.ID) {
		return server.CancelRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	id := identity(ctx)
	run, err := s.inv.CancelRun(ctx, s.tenantDB(ctx), req.ID, id)
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return server.CancelRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	case errors.Is(err, journal.ErrFinished):
		return server.CancelRun409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			fmt.Sprintf("run %s is already %s; only a run that has not finished can be cancelled", run.ID, run.Status))}, nil
	case err != nil:
		return nil, err
	}
	s.log.InfoContext(ctx, "run cancelled", "run_id", run.ID, "function", run.Function, "tenant", run.Tenant, "by", id.Subject)
	return server.CancelRun200JSONResponse(runResult(run)), nil
}

// RerunRun starts a new run of a finished run's function (its current revision) with the
// finished run's input, as the caller, naming the old run in rerun_of. The caller must be
// allowed by the revision's invoke_roles, as for any start: a rerun never lends the
// caller the old run's identity. With from_seq N the new run starts with copies of the
// old run's entries before N (invoker.RerunRun); N past the old run's last seq + 1 is a
// 400 naming the bound.
func (s *Server) RerunRun(ctx context.Context, req server.RerunRunRequestObject) (server.RerunRunResponseObject, error) {
	if !validRunID(req.ID) {
		return server.RerunRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	db := s.tenantDB(ctx)
	tenant := db.Tenant()
	old, err := journal.GetRun(ctx, db, tenant, req.ID)
	if errors.Is(err, journal.ErrNotFound) {
		return server.RerunRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	if err != nil {
		return nil, err
	}
	// A terminal status never changes, so checking it outside the transaction is safe.
	if !old.Status.Terminal() {
		return server.RerunRun409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			fmt.Sprintf("run %s is %s; only a finished run (completed, failed or cancelled) can be rerun", old.ID, old.Status))}, nil
	}
	fromSeq := 1
	if req.Body != nil && req.Body.FromSeq != nil {
		fromSeq = *req.Body.FromSeq
	}
	if fromSeq < 1 {
		return nil, badRequest("from_seq must be between 1 and the run's last seq + 1; got %d", fromSeq)
	}
	caller := identity(ctx)
	n := journal.NewRun{
		ID:       uuid.Must(uuid.NewV7()).String(),
		Tenant:   tenant,
		Function: old.Function,
		Input:    old.Input,
		Identity: caller,
		RerunOf:  &old.ID,
	}
	run, err := s.inv.RerunRun(ctx, db, n, fromSeq)
	if re := (*journal.SeqRangeError)(nil); errors.As(err, &re) {
		if re.Sleeping {
			return nil, badRequest("from_seq must be between 1 and %d: run %s's sleep at seq %d is not over, so it cannot be copied; got %d", re.Max, old.ID, re.Max, fromSeq)
		}
		return nil, badRequest("from_seq must be between 1 and %d, run %s's last seq + 1; got %d", re.Max, old.ID, fromSeq)
	}
	if fe := (*journal.ForbiddenError)(nil); errors.As(err, &fe) {
		return nil, &problemError{http.StatusForbidden, fmt.Sprintf(
			"function %s may be invoked only by the roles (%s) or admin; the token's roles (%s) include none of them",
			old.Function, strings.Join(fe.InvokeRoles, ", "), access.RoleList(caller.Roles))}
	}
	if errors.Is(err, journal.ErrNotFound) {
		return server.RerunRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: notFound(
			fmt.Sprintf("function %q of run %s is no longer registered; register it again to rerun the run", old.Function, old.ID))}, nil
	}
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "run rerun", "run_id", run.ID, "rerun_of", old.ID, "from_seq", fromSeq, "function", run.Function,
		"tenant", run.Tenant, "by", caller.Subject)
	return server.RerunRun202JSONResponse{Body: runToAPI(run, true), Headers: server.RerunRun202ResponseHeaders{Location: resultLocation(run.ID)}}, nil
}
