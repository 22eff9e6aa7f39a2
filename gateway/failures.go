package gateway

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/failure"
	"github.com/stepgate/stepgate/protocol"
)

// Bounds of the dead-letter view (GET /v1/failures).
const (
	defaultFailuresSince = 7 * 24 * time.Hour
	defaultFailureGroups = 100
	maxFailureGroups     = 500
)

// ListFailures lists the caller's tenant's failed runs grouped by function and error
// (failure.FailureGroups), over a window no longer than the gateway's retention, each
// group with its runs redriven and redriven successfully (hide_redriven leaves out the
// groups whose runs all were). Each
// group's sample message is cut to 1000 characters, so an answer is at most a few MiB;
// it is a heavy read (heavyRead).
func (s *Server) ListFailures(ctx context.Context, req server.ListFailuresRequestObject) (server.ListFailuresResponseObject, error) {
	window := defaultFailuresSince
	if req.Params.Since != nil {
		d, err := parseWindow(*req.Params.Since)
		if err != nil {
			return nil, badRequest("since: %v", err)
		}
		window = d
	}
	if max := s.inv.Functions().DefaultRetention(); window > max {
		return nil, badRequest("since: %s is longer than the retention, %s (STEPGATE_RETENTION); failed runs older are gone", window, max)
	}
	limit := defaultFailureGroups
	if req.Params.Limit != nil {
		if *req.Params.Limit < 1 || *req.Params.Limit > maxFailureGroups {
			return nil, badRequest("limit: must be 1 to %d; got %d", maxFailureGroups, *req.Params.Limit)
		}
		limit = *req.Params.Limit
	}
	if err := s.heavyRead(ctx); err != nil {
		return nil, err
	}
	since := time.Now().Add(-window).UTC()
	var groups []failure.FailureGroup
	var more bool
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		groups, more, err = failure.FailureGroups(ctx, db, db.Tenant(), failure.Query{
			Since: since, Limit: limit,
			IncludeDismissed: req.Params.IncludeDismissed != nil && *req.Params.IncludeDismissed,
			HideRedriven:     req.Params.HideRedriven != nil && *req.Params.HideRedriven,
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := protocol.FailureGroupList{Groups: make([]protocol.FailureGroup, len(groups)), Since: since, Truncated: more}
	for i, g := range groups {
		out.Groups[i] = protocol.FailureGroup{
			Group: g.Group, Function: g.Function, ErrorType: g.ErrorType, Message: g.MessageShape,
			SampleMessage: &g.SampleMessage, Count: g.Runs, Redriven: g.Redriven, RedrivenCompleted: g.RedrivenCompleted,
			FirstSeen: g.FirstSeen, LastSeen: g.LastSeen,
			SampleRunID: g.SampleRunID, DismissedAt: g.DismissedAt,
		}
	}
	return server.ListFailures200JSONResponse(out), nil
}

// DismissFailures hides a group of failures of the caller's tenant from the view until
// one of its runs fails again.
func (s *Server) DismissFailures(ctx context.Context, req server.DismissFailuresRequestObject) (server.DismissFailuresResponseObject, error) {
	if !errorGroupKey.MatchString(req.Group) {
		return nil, badRequest("group: must be a group's key, 16 hex digits (see GET /v1/failures); got %q", req.Group)
	}
	db := s.tenantDB(ctx)
	id := identity(ctx)
	d, err := failure.DismissFailures(ctx, db, db.Tenant(), req.Group, id)
	if errors.Is(err, journal.ErrNotFound) {
		return server.DismissFailures404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: notFound(
			fmt.Sprintf("no failed run of this tenant is in group %s", req.Group))}, nil
	}
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "failures dismissed", "group", d.Group, "by", id.Subject)
	return server.DismissFailures200JSONResponse(protocol.FailureDismissal{Group: d.Group, DismissedAt: d.DismissedAt, By: d.By}), nil
}

// parseWindow parses a duration as time.ParseDuration does, or a number of days ("7d").
func parseWindow(s string) (time.Duration, error) {
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		d = time.Duration(n) * 24 * time.Hour
		if n > 100000 {
			err = errors.New("too long")
		}
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration like 90m, 36h or 7d", s)
	}
	return d, nil
}
