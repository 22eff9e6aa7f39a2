package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/schedule"
	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

func scheduleToAPI(s *schedule.Schedule) protocol.Schedule {
	return protocol.Schedule{
		Name: s.Name, Function: s.Function, Cron: s.Cron, Timezone: s.Timezone,
		Input: protocol.AnyJSON(s.Input), Identity: s.Identity,
		Catchup: protocol.ScheduleCatchup(s.Catchup), CatchupWindow: fmtDuration(s.CatchupWindow),
		NextAt: s.NextAt, LastTickAt: s.LastTickAt, LastRunID: s.LastRunID,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

// parseCatchup returns the catch-up policy and window of spec, with their defaults.
func parseCatchup(spec *protocol.ScheduleSpec) (schedule.Catchup, time.Duration, error) {
	catchup, window := schedule.CatchupOne, schedule.DefaultCatchupWindow
	if spec.Catchup != nil && *spec.Catchup != "" {
		if !spec.Catchup.Valid() {
			return "", 0, badRequest("catchup %q is not skip, one or all", *spec.Catchup)
		}
		catchup = schedule.Catchup(*spec.Catchup)
	}
	if spec.CatchupWindow != nil && *spec.CatchupWindow != "" {
		d, err := time.ParseDuration(*spec.CatchupWindow)
		if err != nil {
			return "", 0, badRequest("catchup_window %q is not a duration such as 1m", *spec.CatchupWindow)
		}
		if d < schedule.MinCatchupWindow || d > schedule.MaxCatchupWindow {
			return "", 0, badRequest("catchup_window %s is not between %s and %s",
				fmtDuration(d), fmtDuration(schedule.MinCatchupWindow), fmtDuration(schedule.MaxCatchupWindow))
		}
		window = d.Truncate(time.Millisecond)
	}
	return catchup, window, nil
}

func scheduleNotFound(name string) server.NotFoundApplicationProblemPlusJSONResponse {
	return notFound(fmt.Sprintf("schedule %q does not exist", name))
}

// PutSchedule creates or replaces a schedule. Its runs act as the caller, so the caller
// must be allowed to start them: runs:invoke, and the function's invoke_roles.
func (s *Server) PutSchedule(ctx context.Context, req server.PutScheduleRequestObject) (server.PutScheduleResponseObject, error) {
	id := identity(ctx)
	body := req.Body
	if err := names.CheckFunction("schedule name", req.Name); err != nil {
		return nil, badRequest("%v", err)
	}
	if body.Function == "" {
		return nil, badRequest("function is required: the function each tick starts a run of")
	}
	if err := names.CheckFunction("function", body.Function); err != nil {
		return nil, badRequest("%v", err)
	}
	timezone := "UTC"
	if body.Timezone != nil && *body.Timezone != "" {
		timezone = *body.Timezone
	}
	spec, err := invoker.ParseCron(body.Cron, timezone)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	catchup, window, err := parseCatchup(body)
	if err != nil {
		return nil, err
	}
	input := json.RawMessage("null")
	if body.Input != nil && len(*body.Input) > 0 {
		input = json.RawMessage(*body.Input)
	}
	if err := storable.CheckJSON(input); err != nil {
		return nil, badRequest("input %v", err)
	}
	if !id.Has(access.PermissionRunsInvoke) {
		return nil, &problemError{http.StatusForbidden, fmt.Sprintf(
			"a schedule's runs act as its creator, so putting one needs the %s permission too; the token's roles (%s) do not grant it",
			access.PermissionRunsInvoke, access.RoleList(id.Roles))}
	}

	sch, err := s.inv.Schedules().Put(ctx, journal.ForTenant(s.api, id.Tenant), schedule.NewSchedule{
		ID: uuid.Must(uuid.NewV7()).String(), Tenant: id.Tenant, Name: req.Name, Function: body.Function,
		Cron: body.Cron, Timezone: timezone, Input: input, Identity: id,
		Catchup: catchup, CatchupWindow: window, Next: spec.Next,
	})
	var fe *journal.ForbiddenError
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return nil, badRequest("function %q is not registered", body.Function)
	case errors.As(err, &fe):
		return nil, &problemError{http.StatusForbidden, fmt.Sprintf(
			"function %s may be invoked only by the roles (%s) or admin; the token's roles (%s) include none of them, so its schedule may not start runs as you",
			fe.Function, strings.Join(fe.InvokeRoles, ", "), access.RoleList(id.Roles))}
	case err != nil:
		return nil, err
	}
	return server.PutSchedule200JSONResponse(scheduleToAPI(sch)), nil
}

// GetSchedule returns one of the tenant's schedules.
func (s *Server) GetSchedule(ctx context.Context, req server.GetScheduleRequestObject) (server.GetScheduleResponseObject, error) {
	var sch *schedule.Schedule
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		sch, err = schedule.GetSchedule(ctx, db, db.Tenant(), req.Name)
		return err
	})
	if errors.Is(err, journal.ErrNotFound) {
		return server.GetSchedule404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: scheduleNotFound(req.Name)}, nil
	}
	if err != nil {
		return nil, err
	}
	return server.GetSchedule200JSONResponse(scheduleToAPI(sch)), nil
}

// ListSchedules lists the tenant's schedules by name.
func (s *Server) ListSchedules(ctx context.Context, _ server.ListSchedulesRequestObject) (server.ListSchedulesResponseObject, error) {
	var ss []schedule.Schedule
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		ss, err = schedule.ListSchedules(ctx, db, db.Tenant())
		return err
	})
	if err != nil {
		return nil, err
	}
	out := protocol.ScheduleList{Schedules: make([]protocol.Schedule, 0, len(ss))}
	for i := range ss {
		out.Schedules = append(out.Schedules, scheduleToAPI(&ss[i]))
	}
	return server.ListSchedules200JSONResponse(out), nil
}

// DeleteSchedule deletes a schedule; its pending tick finds nothing and does nothing.
func (s *Server) DeleteSchedule(ctx context.Context, req server.DeleteScheduleRequestObject) (server.DeleteScheduleResponseObject, error) {
	err := s.inv.Schedules().Delete(ctx, s.tenantDB(ctx), req.Name)
	if errors.Is(err, journal.ErrNotFound) {
		return server.DeleteSchedule404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: scheduleNotFound(req.Name)}, nil
	}
	if err != nil {
		return nil, err
	}
	return server.DeleteSchedule204Response{}, nil
}
