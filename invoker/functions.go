package invoker

import (
	"time"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/journal"
)

// Functions is the registry of the gateway's functions: it stores their revisions, and
// keeps each revision it read (its URL and config, its limits clamped to the
// invoker's): a revision never changes once stored.
type Functions struct {
	pool      *pgxpool.Pool
	limits    Limits
	retention time.Duration // Config.Retention
	revisions sync.Map      // revisionKey -> *revision
}

// DefaultRetention returns how long finished runs are kept (Config.Retention) unless
// their function's config says otherwise.
func (f *Functions) DefaultRetention() time.Duration { return f.retention }

// Sync registers a function of db's tenant, whose config raw was checked (ParseConfig,
// Limits.CheckConfig), for a registration of it alone or a sync of its app: it stores a
// new revision only when the URL or the config (its fields, and the timeouts it
// implies) differ from the function's current revision, or it has none, and otherwise
// returns the current one with changed false, so that runs started after it stay on it.
func (f *Functions) Sync(ctx context.Context, db *journal.TenantDB, name, url string, raw json.RawMessage, fc FunctionConfig) (fn *journal.Function, changed bool, err error) {
	return journal.SyncFunction(ctx, db, db.Tenant(), name, url, raw, fc.Timeout, fc.RunTimeout)
}

// Delete unregisters a function of db's tenant; its revisions and runs are kept. It
// returns journal.ErrNotFound when there is none.
func (f *Functions) Delete(ctx context.Context, db *journal.TenantDB, name string) error {
	return journal.DeleteFunction(ctx, db, db.Tenant(), name)
}

type revisionKey struct {
	tenant, name string
	revision     int
}

// revision is a function's revision as the invoker calls it.
type revision struct {
	tenant string // whose function it is: the fair share counts its invocations
	url    string
	config FunctionConfig
	// requestOnly: a duplex invocation of it was not answered as frames (a proxy that
	// buffers bodies, an SDK that does not speak the mode), so this gateway calls it in
	// request/response mode from then on.
	requestOnly atomic.Bool
}

// revision returns revision rev of a function of tenant, read once.
func (f *Functions) revision(ctx context.Context, tenant, name string, rev int) (*revision, error) {
	key := revisionKey{tenant, name, rev}
	if r, ok := f.revisions.Load(key); ok {
		return r.(*revision), nil
	}
	fn, err := journal.GetRevision(ctx, f.pool, tenant, name, rev)
	if err != nil {
		return nil, err
	}
	fc, err := ParseConfig(fn.Config)
	if err != nil {
		return nil, fmt.Errorf("function %s revision %d: %w", name, rev, err)
	}
	r := &revision{tenant: tenant, url: fn.URL, config: f.limits.clamp(fc)}
	f.revisions.Store(key, r)
	return r, nil
}

// revisionOfRun returns the revision a run is pinned to; journal.ErrNotDue for no run.
func (f *Functions) revisionOfRun(ctx context.Context, runID string) (*revision, error) {
	tenant, function, rev, err := journal.RevisionOfRun(ctx, f.pool, runID)
	if errors.Is(err, journal.ErrNotFound) {
		return nil, journal.ErrNotDue
	}
	if err != nil {
		return nil, err
	}
	return f.revision(ctx, tenant, function, rev)
}
