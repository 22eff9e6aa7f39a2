package gateway

import (
	"context"
	"time"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// MaxStatsWindow is the longest window FunctionStats sums up.
const MaxStatsWindow = 720 * time.Hour

// FunctionStats sums up each registered function's runs created in the window (default
// 1h): counts by outcome, success rate, median duration, and when it last ran.
func (s *Server) FunctionStats(ctx context.Context, req server.FunctionStatsRequestObject) (server.FunctionStatsResponseObject, error) {
	window, text := time.Hour, "1h"
	if w := req.Params.Window; w != nil && *w != "" {
		d, err := time.ParseDuration(*w)
		if err != nil || d <= 0 {
			return nil, badRequest("window %q is not a positive duration such as 1h", *w)
		}
		if d > MaxStatsWindow {
			return nil, badRequest("window %s is longer than the maximum of %s", d, MaxStatsWindow)
		}
		window, text = d, *w
	}
	var stats []journal.FunctionStats
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		stats, err = journal.StatsOfFunctions(ctx, db, db.Tenant(), window)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := protocol.FunctionStatsList{Window: text, Functions: make([]protocol.FunctionStats, 0, len(stats))}
	for _, st := range stats {
		f := protocol.FunctionStats{
			Name: st.Name, Runs: st.Runs, Completed: st.Completed, Failed: st.Failed, Running: st.Running,
			LastRunAt: st.LastRunAt,
		}
		if finished := st.Completed + st.Failed; finished > 0 {
			rate := float32(st.Completed) / float32(finished)
			f.SuccessRate = &rate
		}
		if st.P50MS != nil {
			p50 := float32(*st.P50MS)
			f.P50Ms = &p50
		}
		out.Functions = append(out.Functions, f)
	}
	return server.FunctionStats200JSONResponse(out), nil
}

// GetUsage answers what the caller's tenant stores (journal.TenantUsageOf) and its
// storage quotas (invoker.Limits.Quotas).
func (s *Server) GetUsage(ctx context.Context, _ server.GetUsageRequestObject) (server.GetUsageResponseObject, error) {
	var u journal.TenantUsage
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		u, err = journal.TenantUsageOf(ctx, db, db.Tenant())
		return err
	})
	if err != nil {
		return nil, err
	}
	q := s.inv.Limits().Quotas()
	return server.GetUsage200JSONResponse(protocol.TenantUsage{
		Tenant: identity(ctx).Tenant,
		Runs:   u.Runs, MaxRuns: q.MaxRuns,
		StreamBytes: u.StreamBytes, MaxStreamBytes: q.MaxStreamBytes,
		MailboxBytes: u.MailboxBytes, MaxMailboxBytes: q.MaxMailboxBytes,
	}), nil
}
