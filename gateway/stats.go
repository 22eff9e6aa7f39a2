package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/series"
	"github.com/stepgate/stepgate/journal/stats"
	"github.com/stepgate/stepgate/journal/usage"
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
	var fns []stats.FunctionStats
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		fns, err = stats.StatsOfFunctions(ctx, db, db.Tenant(), window)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := protocol.FunctionStatsList{Window: text, Functions: make([]protocol.FunctionStats, 0, len(fns))}
	for _, st := range fns {
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

// GetUsage answers what the caller's tenant stores (usage.TenantUsageOf) and its
// storage quotas (invoker.Limits.Quotas).
func (s *Server) GetUsage(ctx context.Context, _ server.GetUsageRequestObject) (server.GetUsageResponseObject, error) {
	var u usage.TenantUsage
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		u, err = usage.TenantUsageOf(ctx, db, db.Tenant())
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
		EventBytes: u.EventBytes, MaxEventBytes: q.MaxEventBytes,
		JournalBytes: u.JournalBytes, MaxJournalBytes: q.MaxJournalBytes,
	}), nil
}

// A series window: its buckets' length and count.
type seriesWindow struct {
	name    string
	bucket  time.Duration
	buckets int
}

// seriesWindows are the windows GET /v1/functions/{name}/stats and GET
// /v1/stats/functions/series answer; the first is the default.
var seriesWindows = []seriesWindow{
	{"1h", time.Minute, 60},
	{"1d", 15 * time.Minute, 96},
}

// parseSeriesWindow returns the series window named w (the default when empty), or a
// 400 naming the windows there are.
func parseSeriesWindow(w string) (seriesWindow, error) {
	if w == "" {
		return seriesWindows[0], nil
	}
	for _, sw := range seriesWindows {
		if sw.name == w {
			return sw, nil
		}
	}
	return seriesWindow{}, badRequest("window %q is not one of 1h (per minute) and 1d (per 15 minutes)", w)
}

// GetFunctionSeries answers the function's runs bucket by bucket over the last hour or
// day (series.FunctionSeries); 404 when the tenant has no such function.
func (s *Server) GetFunctionSeries(ctx context.Context, req server.GetFunctionSeriesRequestObject) (server.GetFunctionSeriesResponseObject, error) {
	sw, err := parseSeriesWindow(optional(req.Params.Window))
	if err != nil {
		return nil, err
	}
	var buckets []series.SeriesBucket
	err = s.read(ctx, func(db *journal.TenantDB) (err error) {
		if _, err := journal.GetFunction(ctx, db, db.Tenant(), req.Name); err != nil {
			return err
		}
		buckets, err = series.FunctionSeries(ctx, db, db.Tenant(), req.Name, sw.bucket, sw.buckets)
		return err
	})
	if errors.Is(err, journal.ErrNotFound) {
		return server.GetFunctionSeries404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: functionNotFound(req.Name)}, nil
	}
	if err != nil {
		return nil, err
	}
	out := seriesOut(sw, buckets)
	out.Function = &req.Name
	return server.GetFunctionSeries200JSONResponse(out), nil
}

// FunctionsSeries answers the runs of all the tenant's functions bucket by bucket over
// the last hour or day (series.FunctionSeries with no function).
func (s *Server) FunctionsSeries(ctx context.Context, req server.FunctionsSeriesRequestObject) (server.FunctionsSeriesResponseObject, error) {
	sw, err := parseSeriesWindow(optional(req.Params.Window))
	if err != nil {
		return nil, err
	}
	var buckets []series.SeriesBucket
	err = s.read(ctx, func(db *journal.TenantDB) (err error) {
		buckets, err = series.FunctionSeries(ctx, db, db.Tenant(), "", sw.bucket, sw.buckets)
		return err
	})
	if err != nil {
		return nil, err
	}
	return server.FunctionsSeries200JSONResponse(seriesOut(sw, buckets)), nil
}

func seriesOut(sw seriesWindow, buckets []series.SeriesBucket) protocol.FunctionSeries {
	out := protocol.FunctionSeries{Window: sw.name, BucketSeconds: int(sw.bucket / time.Second),
		Buckets: make([]protocol.SeriesBucket, len(buckets))}
	f32 := func(v *float64) *float32 {
		if v == nil {
			return nil
		}
		f := float32(*v)
		return &f
	}
	for i, b := range buckets {
		out.Buckets[i] = protocol.SeriesBucket{
			At: b.At, Started: b.Started, Completed: b.Completed, Failed: b.Failed, Cancelled: b.Cancelled,
			P50Ms: f32(b.P50MS), P95Ms: f32(b.P95MS), WaitP50Ms: f32(b.WaitP50MS), WaitP95Ms: f32(b.WaitP95MS),
			QueueDepth: b.QueueDepth,
		}
	}
	return out
}

// optional is the value of an optional parameter of a string type, "" when it is absent.
func optional[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}
