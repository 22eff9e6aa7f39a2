package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
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
	if b.ID != nil {
		if err := checkClientID("event id", *b.ID); err != nil {
			return nil, err
		}
		n.ID = *b.ID
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

// runSentID reports whether id has the form of the ids of the events and messages runs
// send, "<run id>:<seq>": a UUID in its 36-character text form (any case), a colon and
// decimal digits. Such ids are the runs': the API refuses them (checkClientID), and a
// run may send only its own (checkRunSentID), so no one can claim the id of a run's
// event or message before the run sends it.
func runSentID(id string) bool {
	runID, seq, ok := strings.Cut(id, ":")
	if !ok || len(runID) != 36 || seq == "" || strings.Trim(seq, "0123456789") != "" {
		return false
	}
	_, err := uuid.Parse(runID)
	return err == nil
}

// checkClientID is a 400 naming what when id, an event's or a message's id chosen by an
// API caller, is not a name, or has the form reserved for the ids of runs' events and
// messages.
func checkClientID(what, id string) error {
	if err := checkName(what, id); err != nil {
		return err
	}
	if runSentID(id) {
		return badRequest("%s %q has the form <run id>:<seq>, which is reserved for the events and messages runs send; choose another id", what, id)
	}
	return nil
}

// checkRunSentID checks the id of an event or a message that the run runID sends in
// its entry at seq, defaulting it to "<run id>:<seq>": an id of that form (runSentID)
// must be exactly that one, a 400 naming the rule otherwise, so that a run cannot claim
// another run's (nor its own later entry's) id.
func checkRunSentID(what string, id *string, runID string, seq int) error {
	own := runID + ":" + strconv.Itoa(seq)
	if *id == "" {
		*id = own
	}
	if err := checkName(what, *id); err != nil {
		return err
	}
	if runSentID(*id) && *id != own {
		return badRequest("%s %q has the form <run id>:<seq>, which is reserved: a run's event or message may have that form only as its own, %q", what, *id, own)
	}
	return nil
}

// eventOutput is the output of a journal entry of kind event.
type eventOutput struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data"`
	ID   string          `json:"id"`
}

// checkpointEvent checks an event entry of the invocation that owns runID, and journals
// it and sends its event (invoker.CheckpointEvent). The event's id defaults to
// "<run id>:<seq>" (see checkRunSentID).
func (s *Server) checkpointEvent(ctx context.Context, runID string, invocation int, e protocol.JournalEntry) error {
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
	if err := checkRunSentID("event id", &out.ID, runID, e.Seq); err != nil {
		return err
	}
	if len(out.Data) == 0 {
		out.Data = json.RawMessage("null")
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return badRequest("an event entry's data is not valid JSON: %v", err)
	}
	output := protocol.AnyJSON(raw)
	e.Output = &output
	return s.inv.CheckpointEvent(ctx, runID, invocation, e, invoker.SentEvent{ID: out.ID, Name: out.Name, Data: out.Data})
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
