package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// ExportFormat is the layout of a run's export (RunExport.format in openapi.yaml).
const ExportFormat = "stepgate.run/1"

// exportPageEntries is the entries of each page an export reads its journal by; each
// page is also bounded by journal.GetRunDetail's bytes (8 MiB).
const exportPageEntries = 1000

// ExportRun answers a run of the caller's tenant with its whole journal, its failures
// and its function revision, to replay it locally (RunExport in openapi.yaml). The
// journal and failures are those GetRun shows, page after page: a callback's token is
// masked (entryForReaders), and the function's URL is masked whoever asks (redact.URL).
//
// The answer is streamed: the journal is read and written a page at a time
// (exportPageEntries, 8 MiB), so the gateway holds one page of it, however long the
// journal; the run's fields, its step attempts and its function revision are read after
// the last page, so they are never older than its journal. It is a heavy read
// (heavyRead). A 404 comes before anything is written; a read that fails once the
// answer has begun aborts it (the client sees a cut body, never a document that looks
// whole).
func (s *Server) ExportRun(ctx context.Context, req server.ExportRunRequestObject) (server.ExportRunResponseObject, error) {
	if !validRunID(req.ID) {
		return server.ExportRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	if err := s.heavyRead(ctx); err != nil {
		return nil, err
	}
	var first *journal.Detail
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		first, err = journal.GetRunDetail(ctx, db, db.Tenant(), req.ID, journal.JournalPage{Limit: exportPageEntries})
		return err
	})
	if errors.Is(err, journal.ErrNotFound) {
		return server.ExportRun404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: s.runGone(ctx, s.tenantDB(ctx), req.ID)}, nil
	}
	if err != nil {
		return nil, err
	}
	return runExport{ctx: ctx, s: s, id: req.ID, first: first}, nil
}

// runExport writes a run's export (ExportRun), its first journal page already read.
type runExport struct {
	ctx   context.Context
	s     *Server
	id    string
	first *journal.Detail
}

func (e runExport) VisitExportRunResponse(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	b := bufio.NewWriterSize(w, 64<<10)
	if err := e.write(b); err != nil {
		if e.ctx.Err() == nil {
			e.s.log.WarnContext(e.ctx, "export cut short", slog.String("run_id", e.id), slog.Any("error", err))
		}
		panic(http.ErrAbortHandler) // the client sees a cut body
	}
	return b.Flush()
}

// write writes the document, its fields in the order they are read: the journal page
// by page, then the failures, and last what must not be older than the journal.
func (e runExport) write(b *bufio.Writer) error {
	ctx, s := e.ctx, e.s
	b.WriteString(`{"format":`)
	field(b, ExportFormat)
	b.WriteString(`,"journal":[`)
	d := e.first
	var failures []protocol.AttemptFailure
	for n := 0; ; {
		for _, en := range d.Journal {
			if n > 0 {
				b.WriteByte(',')
			}
			n++
			if err := field(b, entryForReaders(en)); err != nil {
				return err
			}
		}
		for _, f := range d.Failures {
			failures = append(failures, failureToAPI(f))
		}
		if d.Next == 0 {
			break
		}
		after := d.Next
		err := s.read(ctx, func(db *journal.TenantDB) (err error) {
			d, err = journal.GetRunDetail(ctx, db, db.Tenant(), e.id, journal.JournalPage{After: after, Limit: exportPageEntries})
			return err
		})
		if err != nil {
			return err
		}
	}
	b.WriteString(`],"failures":`)
	if failures == nil {
		failures = []protocol.AttemptFailure{}
	}
	if err := field(b, failures); err != nil {
		return err
	}
	var attempts map[int]int
	var fn *journal.Function
	readFunction := identity(ctx).Has(access.PermissionFunctionsRead)
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		if attempts, err = journal.StepAttempts(ctx, db, e.id); err != nil {
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
	if err != nil {
		return err
	}
	if len(attempts) > 0 {
		a := make(map[string]int, len(attempts))
		for seq, n := range attempts {
			a[strconv.Itoa(seq)] = n
		}
		b.WriteString(`,"step_attempts":`)
		if err := field(b, a); err != nil {
			return err
		}
	}
	if fn != nil {
		f, err := functionToAPI(fn, false)
		if err != nil {
			return err
		}
		b.WriteString(`,"function":`)
		if err := field(b, f); err != nil {
			return err
		}
	}
	b.WriteString(`,"run":`)
	if err := field(b, runToAPI(d.Run, true)); err != nil {
		return err
	}
	b.WriteString(`,"exported_at":`)
	if err := field(b, time.Now().UTC()); err != nil {
		return err
	}
	b.WriteString("}\n")
	return nil
}

// field writes v as JSON to b.
func field(b *bufio.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = b.Write(data)
	return err
}
