package gateway

import (
	"context"
	"errors"

	"github.com/stepgate/stepgate/journal"
)

// read runs fn, the reads of a request that may be a little stale, for the caller's
// tenant: on a replica within the bound of Config.Reads when there is one, else on the
// API pool (the primary). A replica never fails a read: when fn fails there, or finds
// nothing (journal.ErrNotFound: a run created a moment ago may not have reached the
// replica), fn runs again on the primary, so fn must only read and set what it
// returns anew each time.
//
// Only these reads go through read: GET /v1/runs, a run's detail and journal pages
// (GET /v1/runs/{id}), its export, GET /v1/functions and a function, its last check
// and its queue, GET /v1/stats/functions, the charts' series (GET
// /v1/functions/{name}/stats, GET /v1/stats/functions/series), GET /v1/usage, GET
// /v1/events, and the schedules. What must see the latest state stays on the primary: every write and
// what it reads, starts (with ?wait or not), checkpoints, a run's result and values
// (long-polls or not), its requests, streams and live streams, operations, signing
// keys, and the tombstone of a deleted run.
func (s *Server) read(ctx context.Context, fn func(db *journal.TenantDB) error) error {
	tenant := identity(ctx).Tenant
	if s.reads != nil {
		if pool, i := s.reads.Pick(); i >= 0 {
			err := fn(journal.ForTenant(pool, tenant))
			if err == nil || ctx.Err() != nil {
				return err
			}
			if !errors.Is(err, journal.ErrNotFound) {
				s.reads.Failed(i, err)
			}
		}
	}
	return fn(s.tenantDB(ctx))
}
