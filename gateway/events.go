package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions/names"
	"github.com/stepgate/stepgate/gateway/api"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
)

func checkEventField(field, v string) error {
	if err := names.Check("event "+field, v); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

// SendEvent stores an event of the caller's tenant and starts the runs it triggers, with
// the caller's identity, in one transaction with their invocation jobs.
func (s *Server) SendEvent(ctx context.Context, req server.SendEventRequestObject) (server.SendEventResponseObject, error) {
	b := req.Body
	if err := checkEventField("name", b.Name); err != nil {
		return nil, err
	}
	n := journal.NewEvent{Name: b.Name}
	if b.Id != nil {
		if err := checkEventField("id", *b.Id); err != nil {
			return nil, err
		}
		n.ID = *b.Id
	} else {
		n.ID = uuid.Must(uuid.NewV7()).String()
	}
	if b.Data != nil {
		n.Data = json.RawMessage(*b.Data)
		if err := journal.CheckJSON(n.Data); err != nil {
			return nil, badRequest("data %v", err)
		}
	}
	id := identity(ctx)
	n.Tenant, n.Identity, n.CheckInvokeRoles = id.Tenant, journal.Identity(id), !id.IsAdmin()
	var ev *journal.Event
	var created bool
	err := pgx.BeginFunc(ctx, journal.ForTenant(s.api, id.Tenant), func(tx pgx.Tx) error {
		var err error
		ev, created, err = s.sendEvent(ctx, tx, n)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := api.EventReceipt{Id: ev.ID, Name: ev.Name, Runs: runIDs(ev.Runs)}
	if !created {
		out.Duplicate = new(true)
	}
	return server.SendEvent202JSONResponse(out), nil
}

// sendEvent stores the event in tx and enqueues the invocations of the runs it starts.
func (s *Server) sendEvent(ctx context.Context, tx pgx.Tx, n journal.NewEvent) (*journal.Event, bool, error) {
	ev, created, err := journal.SendEvent(ctx, tx, n)
	if err != nil || !created {
		return ev, created, err
	}
	for _, runID := range ev.Runs {
		if err := s.inv.Enqueue(ctx, tx, runID); err != nil {
			return nil, false, err
		}
	}
	return ev, true, nil
}

// eventOutput is the output of a journal entry of kind event.
type eventOutput struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data"`
	ID   string          `json:"id"`
}

// checkpointEvent journals an event entry of the invocation that owns runID and sends
// the event, with the run's tenant and identity, in one transaction: the entry is fenced
// like a step's, and a repeated checkpoint finds both the entry and the event (its id)
// already there, so it starts nothing twice. The event's id defaults to
// "<run id>:<seq>".
func (s *Server) checkpointEvent(ctx context.Context, runID string, invocation int, e api.JournalEntry) error {
	var out eventOutput
	if e.Output == nil || json.Unmarshal(*e.Output, &out) != nil {
		return badRequest("an event entry's output is the event: {\"name\", \"data\", \"id\"}")
	}
	if e.Error != nil {
		return badRequest("an event entry has no error")
	}
	if out.Name == "" {
		out.Name = e.Name
	}
	if out.Name != e.Name {
		return badRequest("an event entry is named after its event: %q, not %q", out.Name, e.Name)
	}
	if out.ID == "" {
		out.ID = runID + ":" + strconv.Itoa(e.Seq)
	}
	if err := checkEventField("id", out.ID); err != nil {
		return err
	}
	if len(out.Data) == 0 {
		out.Data = json.RawMessage("null")
	}
	entry := invoker.EntryFromAPI(e)
	raw, err := json.Marshal(out)
	if err != nil {
		return badRequest("an event entry's data is not valid JSON: %v", err)
	}
	entry.Output = raw
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := journal.AppendEntry(ctx, tx, runID, invocation, entry, s.inv.Limits().Bounds()); err != nil {
			return err
		}
		// The entry's fenced insert share-locks the run, so it is running and ours.
		runs, err := journal.RunsByID(ctx, tx, []string{runID})
		if err != nil {
			return err
		}
		if len(runs) != 1 {
			return journal.ErrSuperseded
		}
		run := runs[0]
		_, _, err = s.sendEvent(ctx, tx, journal.NewEvent{
			Tenant: run.Tenant, ID: out.ID, Name: out.Name, Data: out.Data, Identity: run.Identity,
			SourceRunID: &run.ID, CheckInvokeRoles: !slices.Contains(run.Identity.Roles, auth.RoleAdmin),
		})
		return err
	})
	return s.inv.FailOnCheckpoint(ctx, runID, invocation, err)
}

// ListEvents lists the tenant's events, newest first, a page at a time.
func (s *Server) ListEvents(ctx context.Context, req server.ListEventsRequestObject) (server.ListEventsResponseObject, error) {
	p := req.Params
	var f journal.EventFilter
	if p.Name != nil {
		f.Name = *p.Name
	}
	var err error
	if f.Limit, f.After, err = page(p.Limit, p.Cursor, func(id string) bool { return id != "" }); err != nil {
		return nil, err
	}
	db := s.tenantDB(ctx)
	events, next, err := journal.ListEvents(ctx, db, db.Tenant(), f)
	if err != nil {
		return nil, err
	}
	out := api.EventPage{Events: make([]api.Event, 0, len(events))}
	for i := range events {
		out.Events = append(out.Events, eventToAPI(&events[i]))
	}
	out.NextCursor = nextCursor(next)
	return server.ListEvents200JSONResponse(out), nil
}

func eventToAPI(ev *journal.Event) api.Event {
	return api.Event{
		Id: ev.ID, Name: ev.Name, Data: api.AnyJSON(ev.Data), Identity: invoker.IdentityToAPI(ev.Identity),
		SourceRunId: ev.SourceRunID, Runs: runIDs(ev.Runs), CreatedAt: ev.CreatedAt,
	}
}

// runIDs is ids, never nil, so that it encodes as a JSON array.
func runIDs(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}
