// Package appcheck holds the journal's checks of an app against its live runs: the live runs
// a check replays, each function's last check, and the tenant's one running check slot.
package appcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// LiveRunRef names a live run a check replays, and the revision it is on.
type LiveRunRef struct {
	ID       string
	Revision int
}

// LiveRuns are the live runs of a function a check replays (LiveRunsToCheck).
type LiveRuns struct {
	Sample []LiveRunRef
	// Live counts the runs not ended with a journal among the function's
	// MaxLiveRunsCounted newest runs not ended; More says there are more of those.
	Live int
	More bool
}

// MaxLiveRunsCounted bounds the runs not ended a check looks at, per function.
const MaxLiveRunsCounted = 10000

// LiveRunsToCheck returns at most sample live runs of the tenant's function (not ended,
// with at least one journal entry) to replay against new code: the newest run at each
// place in the journal (its last seq) first, then the next newest of each, so that a
// sample holds every place before it holds two runs of one. It looks at the function's
// MaxLiveRunsCounted newest runs not ended.
func LiveRunsToCheck(ctx context.Context, db journal.DB, tenant, function string, sample int) (LiveRuns, error) {
	rows, err := dbsqlc.New(db).LiveRunsToCheck(ctx, dbsqlc.LiveRunsToCheckParams{Sample: int32(sample), Tenant: tenant, Function: function})
	if err != nil {
		return LiveRuns{}, err
	}
	var out LiveRuns
	for _, r := range rows {
		out.Sample = append(out.Sample, LiveRunRef{ID: r.ID, Revision: int(r.Revision)})
		out.Live, out.More = int(r.Live), r.More
	}
	return out, nil
}

// FunctionCheck is a function's last check against its live runs.
type FunctionCheck struct {
	Tenant     string
	Function   string
	CheckedAt  time.Time
	Subject    string // who asked for it
	Registered bool   // the sync registered the code checked
	Forced     bool   // registered although runs would break
	Result     json.RawMessage
}

// PutFunctionCheck keeps c as its function's last check, replacing the one before, when
// the tenant has registered the function; for a name it has not, it keeps nothing.
func PutFunctionCheck(ctx context.Context, db journal.DB, c FunctionCheck) error {
	return dbsqlc.New(db).PutFunctionCheck(ctx, dbsqlc.PutFunctionCheckParams{
		Tenant: c.Tenant, Function: c.Function, CheckedAt: c.CheckedAt, Subject: c.Subject,
		Registered: c.Registered, Forced: c.Forced, Result: c.Result,
	})
}

// GetFunctionCheck returns the tenant's function's last check, or journal.ErrNotFound.
func GetFunctionCheck(ctx context.Context, db journal.DB, tenant, function string) (*FunctionCheck, error) {
	r, err := dbsqlc.New(db).GetFunctionCheck(ctx, dbsqlc.GetFunctionCheckParams{Tenant: tenant, Function: function})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, journal.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &FunctionCheck{Tenant: tenant, Function: function, CheckedAt: r.CheckedAt, Subject: r.Subject,
		Registered: r.Registered, Forced: r.Forced, Result: r.Result}, nil
}

// AppCheckSlot is a running check of a tenant's app (POST /v1/apps?check=true): a tenant
// runs one at a time, whichever gateway serves it (StartAppCheck).
type AppCheckSlot struct {
	ID        string // a UUID the check chose
	Tenant    string
	Subject   string // who asked for it
	App       string // the app's URL, masked as a function's is
	StartedAt time.Time
}

// RunningCheckError is StartAppCheck's refusal: Running holds the tenant's slot.
type RunningCheckError struct{ Running AppCheckSlot }

func (e *RunningCheckError) Error() string {
	return fmt.Sprintf("journal: check %s of the tenant's app %s is still running; one runs at a time", e.Running.ID, e.Running.App)
}

// Unwrap makes errors.Is(err, journal.ErrConflict) hold.
func (e *RunningCheckError) Unwrap() error { return journal.ErrConflict }

// StartAppCheck takes the tenant's check slot for c until ttl has passed, from now (the
// database's clock) or from at when set, and returns c with its StartedAt. When another
// check holds the slot and its ttl has not passed, it returns a *RunningCheckError naming
// that check; a slot held past its ttl (its gateway died mid-check) is taken over. It
// returns journal.ErrConflict when the slot changed hands twice while it looked: the caller may
// ask again. EndAppCheck frees the slot.
func StartAppCheck(ctx context.Context, db journal.DB, c AppCheckSlot, ttl time.Duration, at *time.Time) (*AppCheckSlot, error) {
	q := dbsqlc.New(db)
	for range 2 {
		started, err := q.AppCheckStart(ctx, dbsqlc.AppCheckStartParams{
			Tenant: c.Tenant, ID: c.ID, Subject: c.Subject, App: c.App, TtlSeconds: ttl.Seconds(), Now: at,
		})
		if err == nil {
			c.StartedAt = started
			return &c, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("start check: %w", err)
		}
		r, err := q.AppCheckRunning(ctx, c.Tenant)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // it ended in between: take it
		}
		if err != nil {
			return nil, fmt.Errorf("start check: %w", err)
		}
		return nil, &RunningCheckError{Running: AppCheckSlot{ID: r.ID, Tenant: c.Tenant, Subject: r.Subject, App: r.App, StartedAt: r.StartedAt}}
	}
	return nil, fmt.Errorf("start check: %w", journal.ErrConflict)
}

// EndAppCheck frees the tenant's check slot if the check id holds it; else it does
// nothing.
func EndAppCheck(ctx context.Context, db journal.DB, tenant, id string) error {
	if err := dbsqlc.New(db).AppCheckEnd(ctx, dbsqlc.AppCheckEndParams{Tenant: tenant, ID: id}); err != nil {
		return fmt.Errorf("end check %s: %w", id, err)
	}
	return nil
}
