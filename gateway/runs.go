package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/internal/helpers/tracing"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/operation"
	"github.com/stepgate/stepgate/journal/retention"
	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
)

// MaxWait is the longest a request may wait for a run's result.
const MaxWait = 15 * time.Minute

func parseWait(w *string) (time.Duration, error) {
	if w == nil || *w == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(*w)
	if err != nil || d < 0 {
		return 0, badRequest("wait %q is not a duration such as 30s", *w)
	}
	if d > MaxWait {
		return 0, badRequest("wait %s is longer than the maximum of %s", d, MaxWait)
	}
	return d, nil
}

// MaxStartDelay bounds a delayed start (start_at, delay) from now.
const MaxStartDelay = 365 * 24 * time.Hour

// parseStartAt reads a run's delayed start: start_at or delay, not both; nil for none.
func parseStartAt(at *time.Time, delay *string) (*time.Time, error) {
	switch {
	case at != nil && delay != nil:
		return nil, badRequest("start_at and delay cannot both be set")
	case delay != nil:
		d, err := time.ParseDuration(*delay)
		if err != nil || d < 0 {
			return nil, badRequest("delay %q is not a duration such as 10s", *delay)
		}
		if d > MaxStartDelay {
			return nil, badRequest("delay %s is longer than the maximum of %s (1 year)", d, MaxStartDelay)
		}
		t := time.Now().Add(d)
		return &t, nil
	case at != nil:
		if time.Until(*at) > MaxStartDelay {
			return nil, badRequest("start_at %s is more than the maximum of %s (1 year) from now", at.Format(time.RFC3339), MaxStartDelay)
		}
		return at, nil
	}
	return nil, nil
}

// parseDeadline reads a run's deadline: deadline or timeout, not both; nil for none.
func parseDeadline(at *time.Time, timeout *string) (*time.Time, error) {
	switch {
	case at != nil && timeout != nil:
		return nil, badRequest("deadline and timeout cannot both be set")
	case timeout != nil:
		d, err := time.ParseDuration(*timeout)
		if err != nil || d < time.Second || d > invoker.MaxDeadline {
			return nil, badRequest("timeout %q is not a duration from 1s to %s (10 years), such as 1h", *timeout, invoker.MaxDeadline)
		}
		t := time.Now().Add(d)
		return &t, nil
	case at != nil:
		if !at.After(time.Now()) {
			return nil, badRequest("deadline %s is not in the future", at.Format(time.RFC3339))
		}
		if time.Until(*at) > invoker.MaxDeadline {
			return nil, badRequest("deadline %s is more than the maximum of %s (10 years) from now", at.Format(time.RFC3339), invoker.MaxDeadline)
		}
		return at, nil
	}
	return nil, nil
}

func runResult(run *journal.Run) protocol.RunResult {
	r := protocol.RunResult{ID: run.ID, Status: protocol.RunStatus(run.Status), Error: errorToAPI(run.Error)}
	if run.Output != nil {
		o := protocol.AnyJSON(run.Output)
		r.Output = &o
	}
	return r
}

func resultLocation(runID string) *string {
	loc := "/v1/runs/" + runID + "/result"
	return &loc
}

// StartRun creates a run. Without wait it is queued for a River worker and answered 202.
// With wait this gateway invokes it at once (the run is created already claimed, so the
// first invocation has no queue hop) and answers its result, or 202 when the wait runs
// out; the invocation goes on regardless of the caller. Past the gateway's bounds on such
// invocations (in all and per tenant) the run is queued instead, and the request still
// waits for its result. A request with wait holds a place among the caller's starts
// with wait (syncStartSlots, caps of their own, not the live streams') until it is
// answered or the caller leaves; with none free it is a 429 and no run is created.
func (s *Server) StartRun(ctx context.Context, req server.StartRunRequestObject) (server.StartRunResponseObject, error) {
	if s.draining.Load() {
		return nil, errDraining
	}
	wait, err := parseWait(req.Params.Wait)
	if err != nil {
		return nil, err
	}
	startAt, err := parseStartAt(req.Params.StartAt, req.Params.Delay)
	if err != nil {
		return nil, err
	}
	if startAt != nil && wait > 0 {
		return nil, badRequest("wait cannot be used with a delayed start (start_at or delay)")
	}
	runDeadline, err := parseDeadline(req.Params.Deadline, req.Params.Timeout)
	if err != nil {
		return nil, err
	}
	var priority int
	if p := req.Params.Priority; p != nil {
		if err := invoker.CheckPriority("priority", *p); err != nil {
			return nil, badRequest("%v", err)
		}
		priority = *p
	}
	id := identity(ctx)
	input := json.RawMessage("null")
	if req.Body != nil && len(*req.Body) > 0 {
		input = json.RawMessage(*req.Body)
	}
	if err := storable.CheckJSON(input); err != nil {
		return nil, badRequest("input %v", err)
	}
	n := journal.NewRun{
		ID:       uuid.Must(uuid.NewV7()).String(),
		Tenant:   id.Tenant,
		Function: req.Name,
		Input:    input,
		Identity: id,
		StartAt:  startAt,
		Deadline: runDeadline,
		Priority: priority,
	}
	if req.Params.IdempotencyKey != nil {
		if err := checkName("Idempotency-Key", *req.Params.IdempotencyKey); err != nil {
			return nil, err
		}
		n.IdempotencyKey = *req.Params.IdempotencyKey
	}
	if wait > 0 {
		// Before the run is created: a request refused here starts nothing.
		releaseSlot, err := s.syncStartSlots(id)
		if err != nil {
			return nil, err
		}
		defer releaseSlot()
	}
	// invoke_roles are checked in the statement that creates the run.
	release, claim := func() {}, false
	if wait > 0 {
		if r := s.waits.acquire(id.Tenant); r != nil {
			release, claim = r, true
		}
	}

	ctx, span := s.startSpan(ctx, req.Name, n.ID)
	if span != nil {
		defer span.End()
	}
	db := journal.ForTenant(s.api, id.Tenant)
	var run *journal.Run
	var done <-chan *invoker.Result
	var unsubscribe func()
	var ch <-chan struct{}
	if claim {
		// Subscribe before invoking, so a finish on another gateway after a suspension
		// is not missed.
		ch, unsubscribe = s.inv.Listener().Subscribe(n.ID)
		defer unsubscribe()
		run, _, done, err = s.inv.StartRunNow(ctx, db, n, release)
	} else {
		run, _, err = s.inv.StartRun(ctx, db, n)
	}
	if fe := (*journal.ForbiddenError)(nil); errors.As(err, &fe) {
		return nil, &problemError{http.StatusForbidden, fmt.Sprintf(
			"function %s may be invoked only by the roles (%s) or admin; the token's roles (%s) include none of them",
			req.Name, strings.Join(fe.InvokeRoles, ", "), access.RoleList(id.Roles))}
	}
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return server.StartRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: functionNotFound(req.Name)}, nil
	case errors.Is(err, invoker.ErrDelayedDebounce):
		return nil, badRequest("function %s is debounced (config.debounce): its runs cannot have a delayed start (start_at or delay)", req.Name)
	case errors.Is(err, journal.ErrIdempotencyMismatch):
		return server.StartRun409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			fmt.Sprintf("idempotency key %q was used with a different input for function %s", n.IdempotencyKey, req.Name))}, nil
	case err != nil:
		return nil, err
	}
	if span != nil && run.ID != n.ID {
		// An idempotent repeat: the run is the one the key started before.
		span.AddLink(trace.Link{SpanContext: tracing.RunSpanContext(run.ID)})
		span.SetAttributes(attribute.String("stepgate.run.id", run.ID), attribute.Bool("stepgate.idempotent_repeat", true))
	}
	if wait == 0 || run.Status.Terminal() {
		return startAnswer(run), nil
	}
	deadline := time.Now().Add(wait)
	if done != nil {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case res := <-done:
			if res != nil && res.Status.Terminal() {
				return server.StartRun200JSONResponse{ID: run.ID, Status: protocol.RunStatus(res.Status),
					Output: rawPtr(res.Output), Error: errorToAPI(res.Error)}, nil
			}
		case <-timer.C:
			return startAnswer(run), nil
		case <-ctx.Done():
			// The caller left, or the gateway stops: its place is freed, and the
			// invocation goes on.
			return startAnswer(run), nil
		}
		run, err = s.inv.AwaitRun(ctx, journal.ForTenant(s.api, id.Tenant), run.ID, ch, deadline)
	} else {
		run, err = s.inv.AwaitRun(ctx, journal.ForTenant(s.api, id.Tenant), run.ID, nil, deadline)
	}
	if err != nil {
		return nil, err
	}
	return startAnswer(run), nil
}

func startAnswer(run *journal.Run) server.StartRunResponseObject {
	if run.Status.Terminal() {
		return server.StartRun200JSONResponse(runResult(run))
	}
	return server.StartRun202JSONResponse{Body: runResult(run), Headers: server.StartRun202ResponseHeaders{Location: resultLocation(run.ID)}}
}

func rawPtr(b json.RawMessage) *protocol.AnyJSON {
	if b == nil {
		return nil
	}
	a := protocol.AnyJSON(b)
	return &a
}

// GetRunResult attaches to a run and waits up to wait for it to finish. A request that
// waits holds a place among the caller's live streams (streamSlots) until it is answered
// or its caller leaves.
func (s *Server) GetRunResult(ctx context.Context, req server.GetRunResultRequestObject) (server.GetRunResultResponseObject, error) {
	wait, err := parseWait(req.Params.Wait)
	if err != nil {
		return nil, err
	}
	tenant := identity(ctx).Tenant
	if !validRunID(req.ID) {
		return server.GetRunResult404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	var run *journal.Run
	if wait > 0 {
		release, slotErr := s.streamSlots(identity(ctx))
		if slotErr != nil {
			return nil, slotErr
		}
		defer release()
		run, err = s.inv.AwaitRun(ctx, journal.ForTenant(s.api, tenant), req.ID, nil, time.Now().Add(wait))
	} else {
		run, err = journal.GetRun(ctx, journal.ForTenant(s.api, tenant), tenant, req.ID)
	}
	if errors.Is(err, journal.ErrNotFound) {
		return server.GetRunResult404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: s.runGone(ctx, journal.ForTenant(s.api, tenant), req.ID)}, nil
	}
	if err != nil {
		return nil, err
	}
	if run.Status.Terminal() {
		return server.GetRunResult200JSONResponse(runResult(run)), nil
	}
	return server.GetRunResult202JSONResponse{Body: runResult(run), Headers: server.GetRunResult202ResponseHeaders{Location: resultLocation(run.ID)}}, nil
}

// tenantDB returns the handle through which everything the gateway does for the caller
// goes: its statements see only the caller's tenant (row-level security), on top of the
// tenant filter of each query.
func (s *Server) tenantDB(ctx context.Context) *journal.TenantDB {
	return journal.ForTenant(s.api, identity(ctx).Tenant)
}

func runNotFound(id string) server.NotFoundApplicationProblemPlusJSONResponse {
	return notFound(fmt.Sprintf("run %q does not exist", id))
}

// runGone is the 404 of a run of db's tenant that is not found: one that says so when
// retention deleted it (its tombstone), else runNotFound.
func (s *Server) runGone(ctx context.Context, db *journal.TenantDB, id string) server.NotFoundApplicationProblemPlusJSONResponse {
	t, err := retention.RunTombstoneOf(ctx, db, db.Tenant(), id)
	if err != nil {
		return runNotFound(id)
	}
	return notFound(fmt.Sprintf("run %q of function %s finished at %s and was deleted at %s: finished runs are kept for their function's config.retention, else the gateway's STEPGATE_RETENTION",
		id, t.Function, t.FinishedAt.UTC().Format(time.RFC3339), t.DeletedAt.UTC().Format(time.RFC3339)))
}

// validRunID reports whether id can name a run at all; other ids are simply not found.
func validRunID(id string) bool {
	_, err := uuid.Parse(id)
	return err == nil
}

// runToAPI returns a run for the API; without io, with no input and no output.
func runToAPI(run *journal.Run, io bool) protocol.Run {
	r := protocol.Run{
		ID: run.ID, Function: run.Function, Revision: run.Revision, Status: protocol.RunStatus(run.Status),
		Error:    errorToAPI(run.Error),
		Identity: run.Identity, IdempotencyKey: run.IdempotencyKey, ParentID: run.ParentID,
		ParentSeq: run.ParentSeq, ParentName: run.ParentName, RerunOf: run.RerunOf,
		Invocations: run.Invocations, FailedInvocations: run.FailedInvocations, Recoveries: run.Recoveries, WakeAt: run.WakeAt, Deadline: run.Deadline, Held: run.Held, Priority: &run.Priority, CreatedAt: run.CreatedAt, StartedAt: run.StartedAt,
		FinishedAt: run.FinishedAt, CancelledBy: run.CancelledBy, Awaiting: awaitingToAPI(run.Awaiting),
	}
	if run.Detached {
		r.Detached = &run.Detached
	}
	if io {
		r.Input, r.Output = rawPtr(run.Input), rawPtr(run.Output)
	}
	return r
}

// GetRun returns a run with a page of its journal and those entries' failed attempts.
func (s *Server) GetRun(ctx context.Context, req server.GetRunRequestObject) (server.GetRunResponseObject, error) {
	if !validRunID(req.ID) {
		return server.GetRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	var p journal.JournalPage
	if l := req.Params.JournalLimit; l != nil {
		if *l < 1 || *l > 1000 {
			return nil, badRequest("journal_limit %d is not from 1 to 1000", *l)
		}
		p.Limit = *l
	}
	if c := req.Params.JournalCursor; c != nil && *c != "" {
		n, err := strconv.Atoi(*c)
		if err != nil || n < 1 {
			return nil, badRequest("journal_cursor is not one this API returned")
		}
		p.After = n
	}
	var d *journal.Detail
	var reruns []string
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		if d, err = journal.GetRunDetail(ctx, db, db.Tenant(), req.ID, p); err != nil {
			return err
		}
		reruns, err = operation.RunReruns(ctx, db, db.Tenant(), req.ID)
		return err
	})
	if errors.Is(err, journal.ErrNotFound) {
		return server.GetRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: s.runGone(ctx, s.tenantDB(ctx), req.ID)}, nil
	}
	if err != nil {
		return nil, err
	}
	r := runToAPI(d.Run, true)
	out := protocol.RunDetail{
		ID: r.ID, Function: r.Function, Revision: r.Revision, Status: r.Status, Input: r.Input, Output: r.Output,
		Error: r.Error, Identity: r.Identity, IdempotencyKey: r.IdempotencyKey, ParentID: r.ParentID,
		ParentSeq: r.ParentSeq, ParentName: r.ParentName, RerunOf: r.RerunOf,
		Invocations: r.Invocations, FailedInvocations: r.FailedInvocations, Recoveries: r.Recoveries, WakeAt: r.WakeAt, Deadline: r.Deadline, Held: r.Held, Priority: r.Priority, CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		CancelledBy: r.CancelledBy, Awaiting: r.Awaiting, Detached: r.Detached,
		Journal:  make([]protocol.JournalEntry, 0, len(d.Journal)),
		Failures: make([]protocol.AttemptFailure, 0, len(d.Failures)),
	}
	if len(reruns) > 0 {
		out.RerunBy = &reruns
	}
	for _, e := range d.Journal {
		out.Journal = append(out.Journal, entryForReaders(e))
	}
	for _, f := range d.Failures {
		out.Failures = append(out.Failures, failureToAPI(f))
	}
	if d.Next > 0 {
		out.JournalNextCursor = new(strconv.Itoa(d.Next))
	}
	return server.GetRun200JSONResponse(out), nil
}

// ListRuns lists the tenant's runs, newest first, a page at a time.
func (s *Server) ListRuns(ctx context.Context, req server.ListRunsRequestObject) (server.ListRunsResponseObject, error) {
	p := req.Params
	f := journal.RunFilter{}
	if p.Function != nil {
		f.Function = *p.Function
	}
	if p.IdempotencyKey != nil {
		f.IdempotencyKey = *p.IdempotencyKey
	}
	if p.Status != nil {
		f.Status = journal.Status(*p.Status)
		switch f.Status {
		case journal.StatusScheduled, journal.StatusQueued, journal.StatusRunning, journal.StatusSuspended,
			journal.StatusCompleted, journal.StatusFailed, journal.StatusCancelled:
		default:
			return nil, badRequest("status %q is not a run status", *p.Status)
		}
	}
	if p.CreatedAfter != nil {
		f.CreatedAfter = *p.CreatedAfter
	}
	if p.CreatedBefore != nil {
		f.CreatedBefore = *p.CreatedBefore
	}
	if p.ErrorGroup != nil {
		if !errorGroupKey.MatchString(*p.ErrorGroup) {
			return nil, badRequest("error_group: must be a group's key, 16 hex digits (see GET /v1/failures); got %q", *p.ErrorGroup)
		}
		f.ErrorGroup = *p.ErrorGroup
	}
	f.IncludeIO = p.Include != nil && *p.Include == protocol.Io
	var err error
	if f.Limit, f.After, err = page(p.Limit, p.Cursor, validRunID); err != nil {
		return nil, err
	}
	if f.IncludeIO {
		if err := s.heavyRead(ctx); err != nil {
			return nil, err
		}
	}
	var runs []journal.Run
	var next *journal.Cursor
	err = s.read(ctx, func(db *journal.TenantDB) (err error) {
		runs, next, err = journal.ListRuns(ctx, db, db.Tenant(), f)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := protocol.RunPage{Runs: make([]protocol.Run, 0, len(runs))}
	for i := range runs {
		out.Runs = append(out.Runs, runToAPI(&runs[i], f.IncludeIO))
	}
	out.NextCursor = nextCursor(next)
	return server.ListRuns200JSONResponse(out), nil
}

// page reads a listing's limit (1 to 500) and cursor parameters; validID tells whether
// a cursor's id can be one of the listing's ids, so a forged cursor is a 400, not a
// failing query.
func page(limit *int, cursor *string, validID func(string) bool) (int, *journal.Cursor, error) {
	n := 0
	if limit != nil {
		if *limit < 1 || *limit > 500 {
			return 0, nil, badRequest("limit %d is not between 1 and 500", *limit)
		}
		n = *limit
	}
	if cursor == nil || *cursor == "" {
		return n, nil, nil
	}
	var c journal.Cursor
	b, err := base64.RawURLEncoding.DecodeString(*cursor)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.CreatedAt.IsZero() || !validID(c.ID) {
		return 0, nil, badRequest("cursor is not one this API returned")
	}
	return n, &c, nil
}

// nextCursor encodes the position of a listing's next page; nil stays nil.
func nextCursor(c *journal.Cursor) *string {
	if c == nil {
		return nil
	}
	b, _ := json.Marshal(c) // a struct of a time and a string always encodes
	s := base64.RawURLEncoding.EncodeToString(b)
	return &s
}

// Checkpoint journals one entry a function checkpoints from its process (a finished
// step, a sent event or message, a published value, a callback, a patch marker, a
// sleep: invoker.Checkpoints.Append), for the invocation its token names. It works on the
// system pool: the token, bound to one run and one invocation, is what scopes it (and a
// send looks only at runs of that run's tenant).
func (s *Server) Checkpoint(ctx context.Context, req server.CheckpointRequestObject) (server.CheckpointResponseObject, error) {
	claim, _ := ctx.Value(invocationKey{}).(invocationClaim)
	if claim.runID != req.ID {
		return server.Checkpoint401ApplicationProblemPlusJSONResponse{UnauthorizedApplicationProblemPlusJSONResponse: server.UnauthorizedApplicationProblemPlusJSONResponse(
			problem(http.StatusUnauthorized, "invocation token is for another run"))}, nil
	}
	e := req.Body
	ack, err := s.inv.Checkpoints().Append(ctx, invoker.Invocation{RunID: req.ID, Number: claim.invocation}, *e)
	if err != nil {
		r := invoker.CheckpointRefusal(err)
		switch {
		case r == nil:
			return nil, err
		case r.Status == http.StatusBadRequest:
			return nil, badRequest("%s", r.Detail)
		}
		return server.Checkpoint409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: server.ConflictApplicationProblemPlusJSONResponse(r.Problem())}, nil
	}
	return server.Checkpoint200JSONResponse(invoker.AckOf(*e, ack)), nil
}
