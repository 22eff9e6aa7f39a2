package gateway

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// checkName is a 400 naming what when v is not a name (1 to 255 bytes, storable).
func checkName(what, v string) error {
	if err := names.Check(what, v); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

// SendEvent stores an event of the caller's tenant and starts the runs it triggers, with
// the caller's identity, in one transaction with their invocation jobs.
func (s *Server) SendEvent(ctx context.Context, req server.SendEventRequestObject) (server.SendEventResponseObject, error) {
	b := req.Body
	if err := checkName("event name", b.Name); err != nil {
		return nil, err
	}
	n := journal.NewEvent{Name: b.Name}
	var err error
	if n.ID, n.Data, err = clientSent("event", b.ID, b.Data); err != nil {
		return nil, err
	}
	id := identity(ctx)
	n.Tenant, n.Identity = id.Tenant, id
	ev, created, err := s.inv.SendEvent(ctx, journal.ForTenant(s.api, id.Tenant), n)
	if err != nil {
		return nil, err
	}
	out := protocol.EventReceipt{ID: ev.ID, Name: ev.Name, Runs: runIDs(ev.Runs)}
	if !created {
		out.Duplicate = new(true)
	}
	if len(ev.Resumed) > 0 {
		out.Resumed = &ev.Resumed
	}
	out.Skipped = skippedToAPI(ev.Skipped)
	return server.SendEvent202JSONResponse(out), nil
}

// clientSent returns the id and data of an event, a message or a request (what) a
// caller sends: its own id (checkClientID) or a new UUIDv7, and its data, which
// Postgres must be able to store (a 400 naming the field otherwise); nil data stays
// nil (JSON null).
func clientSent(what string, id *string, data *protocol.AnyJSON) (string, json.RawMessage, error) {
	out := uuid.Must(uuid.NewV7()).String()
	if id != nil {
		if err := checkClientID(what+" id", *id); err != nil {
			return "", nil, err
		}
		out = *id
	}
	if data == nil {
		return out, nil, nil
	}
	if err := storable.CheckJSON(*data); err != nil {
		return "", nil, badRequest("data %v", err)
	}
	return out, json.RawMessage(*data), nil
}

// checkClientID is a 400 naming what when id, an event's or a message's id chosen by an
// API caller, is not a name, or has the form reserved for the ids of runs' events and
// messages.
func checkClientID(what, id string) error {
	if err := checkName(what, id); err != nil {
		return err
	}
	if names.RunSentID(id) {
		return badRequest("%s %q has the form <run id>:<seq>, which is reserved for the events and messages runs send; choose another id", what, id)
	}
	return nil
}

// ListEvents lists the tenant's events, newest first, a page at a time: at most limit
// events, and no more than 8 MiB of their data past the first (journal.ListEvents). It
// is a heavy read (heavyRead).
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
	if err := s.heavyRead(ctx); err != nil {
		return nil, err
	}
	var events []journal.Event
	var next *journal.Cursor
	err = s.read(ctx, func(db *journal.TenantDB) (err error) {
		events, next, err = journal.ListEvents(ctx, db, db.Tenant(), f)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := protocol.EventPage{Events: make([]protocol.Event, 0, len(events))}
	for i := range events {
		out.Events = append(out.Events, eventToAPI(&events[i]))
	}
	out.NextCursor = nextCursor(next)
	return server.ListEvents200JSONResponse(out), nil
}

func eventToAPI(ev *journal.Event) protocol.Event {
	return protocol.Event{
		ID: ev.ID, Name: ev.Name, Data: protocol.AnyJSON(ev.Data), Identity: ev.Identity,
		SourceRunID: ev.SourceRunID, Runs: runIDs(ev.Runs), CreatedAt: ev.CreatedAt,
		Skipped: skippedToAPI(ev.Skipped),
	}
}

// skippedToAPI is an event's skipped starts; nil for none.
func skippedToAPI(sk []journal.SkippedStart) *[]protocol.SkippedStart {
	if len(sk) == 0 {
		return nil
	}
	out := make([]protocol.SkippedStart, len(sk))
	for i, s := range sk {
		out[i] = protocol.SkippedStart{Function: s.Function, Reason: s.Reason}
	}
	return &out
}

// runIDs is ids, never nil, so that it encodes as a JSON array.
func runIDs(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}
