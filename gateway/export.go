package gateway

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// ExportFormat is the layout of a run's export (RunExport.format in openapi.yaml).
const ExportFormat = "stepgate.run/1"

// ExportRun returns a run of the caller's tenant with its whole journal, its failures
// and its function revision, to replay it locally (RunExport in openapi.yaml). The
// journal and failures are those GetRun shows, page after page: a callback's token is
// masked (entryForReaders), and the function's URL is masked whoever asks (redact.URL).
// It is bounded as journal.GetWholeRun, which reads it.
func (s *Server) ExportRun(ctx context.Context, req server.ExportRunRequestObject) (server.ExportRunResponseObject, error) {
	if !validRunID(req.ID) {
		return server.ExportRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	out := protocol.RunExport{
		Format:   ExportFormat,
		Journal:  []protocol.JournalEntry{},
		Failures: []protocol.AttemptFailure{},
	}
	var d *journal.Detail
	var attempts map[int]int
	var fn *journal.Function
	readFunction := identity(ctx).Has(access.PermissionFunctionsRead)
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		if d, err = journal.GetWholeRun(ctx, db, db.Tenant(), req.ID); err != nil {
			return err
		}
		if attempts, err = journal.StepAttempts(ctx, db, req.ID); err != nil {
			return err
		}
		fn = nil
		if readFunction {
			fn, err = journal.GetRevision(ctx, db, db.Tenant(), d.Run.Function, d.Run.Revision)
			if errors.Is(err, journal.ErrNotFound) {
				fn, err = nil, nil
			}
		}
		return err
	})
	if errors.Is(err, journal.ErrNotFound) {
		return server.ExportRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: s.runGone(ctx, s.tenantDB(ctx), req.ID)}, nil
	}
	if err != nil {
		return nil, err
	}
	run, entries, failures := d.Run, d.Journal, d.Failures
	out.ExportedAt = time.Now().UTC()
	out.Run = runToAPI(run, true)
	for _, e := range entries {
		out.Journal = append(out.Journal, entryForReaders(e))
	}
	for _, f := range failures {
		out.Failures = append(out.Failures, failureToAPI(f))
	}
	if len(attempts) > 0 {
		a := make(map[string]int, len(attempts))
		for seq, n := range attempts {
			a[strconv.Itoa(seq)] = n
		}
		out.StepAttempts = &a
	}
	if fn != nil {
		f, err := functionToAPI(fn, false)
		if err != nil {
			return nil, err
		}
		out.Function = &f
	}
	return server.ExportRun200JSONResponse(out), nil
}
