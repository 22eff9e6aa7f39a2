package journal

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

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
func LiveRunsToCheck(ctx context.Context, db DB, tenant, function string, sample int) (LiveRuns, error) {
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

// PutFunctionCheck keeps c as its function's last check, replacing the one before.
func PutFunctionCheck(ctx context.Context, db DB, c FunctionCheck) error {
	return dbsqlc.New(db).PutFunctionCheck(ctx, dbsqlc.PutFunctionCheckParams{
		Tenant: c.Tenant, Function: c.Function, CheckedAt: c.CheckedAt, Subject: c.Subject,
		Registered: c.Registered, Forced: c.Forced, Result: c.Result,
	})
}

// GetFunctionCheck returns the tenant's function's last check, or ErrNotFound.
func GetFunctionCheck(ctx context.Context, db DB, tenant, function string) (*FunctionCheck, error) {
	r, err := dbsqlc.New(db).GetFunctionCheck(ctx, dbsqlc.GetFunctionCheckParams{Tenant: tenant, Function: function})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &FunctionCheck{Tenant: tenant, Function: function, CheckedAt: r.CheckedAt, Subject: r.Subject,
		Registered: r.Registered, Forced: r.Forced, Result: r.Result}, nil
}
