package journal

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// An entry of kind "event" is an event a run sent (step.SendEvent): its output is the
// event's {name, data, id}. It is checkpointed like a step, and the checkpoint stores
// the event (see SendEvent) in the entry's transaction.

// Event is a named JSON payload sent by a tenant, through the API or from a run. Events
// are immutable; (Tenant, ID) is unique.
type Event struct {
	Tenant   string
	ID       string
	Name     string
	Data     json.RawMessage
	Identity Identity // The sender's.
	// SourceRunID is the run that sent the event; nil for one sent through the API.
	SourceRunID *string
	Runs        []string // The runs the event started, by function name.
	// Skipped are the functions its triggers did not start (a rate limit), and why.
	Skipped   []SkippedStart
	CreatedAt time.Time
	// Flowed are the functions with flow control its triggers name, when it was just
	// sent: SendEvent starts none of them; the caller does, through their flow control
	// (see flow.CompleteEvent).
	Flowed []string
	// Held are the runs the caller started for Flowed that flow control scheduled, for
	// it to arm their wake-ups once the event commits; not stored.
	Held []*Run
	// Resumed are the waiting runs the event resumed (ResumeWaiters), when it was
	// just sent; not stored with the event (each run's journal names it).
	Resumed []string
}

// NewEvent is what SendEvent needs to store an event.
type NewEvent struct {
	Tenant string
	// ID deduplicates the tenant's events: the first event with an id wins. Required.
	ID   string
	Name string
	Data json.RawMessage // Defaults to JSON null.
	// Identity is the sender's; every run the event starts carries it.
	Identity    Identity
	SourceRunID *string // The run that sends the event, if any.
	// MaxTenantRuns caps the runs the tenant stores (usage.Quotas.MaxRuns): an event whose
	// triggers would start runs past it is not stored, and SendEvent returns a
	// *QuotaError. 0 does not limit.
	MaxTenantRuns int64
	// MaxTenantJournalBytes caps the journal bytes of the tenant's finished runs
	// (usage.Quotas.MaxJournalBytes): once they reach it, an event that would start runs is
	// not stored, as for MaxTenantRuns. 0 does not limit.
	MaxTenantJournalBytes int64
	// MaxTenantEventBytes caps the bytes of the tenant's events' data
	// (usage.Quotas.MaxEventBytes): an event that would pass it is not stored, and SendEvent
	// returns a *QuotaError. 0 does not limit.
	MaxTenantEventBytes int64
}

// SendEvent stores an event of the tenant and, when its id is new, starts a queued run of
// each of the tenant's functions whose current revision has a trigger with the event's
// exact name (config.triggers[].event), with the event's data as input and its
// identity, all in one statement. It returns the event and created=true; the caller
// enqueues the invocation of each of ev.Runs in the same transaction. When the tenant
// already has an event with that id, it returns that first event and created=false,
// and starts nothing. The functions with flow control it triggers are not started but
// named in ev.Flowed. Concurrent sends of one id wait for each other: one wins. Each
// run created notifies runevents.EventChannel when a gateway watches the tenant. A new event whose
// triggers would start runs past n.MaxTenantRuns is refused whole with a *QuotaError.
//
// Triggers that follow it (docs/internals.md): event_usage_on_insert; run_event_on_insert and run_usage_on_insert, for the runs it starts.
func SendEvent(ctx context.Context, db DB, n NewEvent) (ev *Event, created bool, err error) {
	if n.ID == "" || n.Name == "" {
		return nil, false, errors.New("journal: an event needs an id and a name")
	}
	data := n.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	roles := n.Identity.Roles
	if roles == nil {
		roles = []string{}
	}
	identity, err := json.Marshal(n.Identity)
	if err != nil {
		return nil, false, fmt.Errorf("send event %s: %w", n.Name, unstorable(err))
	}
	row, err := dbsqlc.New(db).EventSend(ctx, dbsqlc.EventSendParams{
		Tenant: n.Tenant, ID: n.ID, Name: n.Name, Data: data, Identity: identity, SourceRunID: n.SourceRunID,
		Checked: !n.Identity.IsAdmin(), Roles: roles, MaxRuns: n.MaxTenantRuns,
		MaxJournalBytes: n.MaxTenantJournalBytes, MaxEventBytes: n.MaxTenantEventBytes,
	})
	if err == nil {
		ev, err = eventOf(dbsqlc.EventGetRow{
			Tenant: row.Tenant, ID: row.ID, Name: row.Name, Data: row.Data, Identity: row.Identity,
			SourceRunID: row.SourceRunID, Runs: row.Runs, Skipped: row.Skipped, CreatedAt: row.CreatedAt,
		})
	}
	if err == nil {
		if len(row.Flowed) > 0 {
			ev.Flowed = row.Flowed
		}
		return ev, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("send event %s: %w", n.Name, unstorable(err))
	}
	ev, err = getEvent(ctx, db, n.Tenant, n.ID)
	if errors.Is(err, ErrNotFound) && (n.MaxTenantRuns > 0 || n.MaxTenantJournalBytes > 0 || n.MaxTenantEventBytes > 0) {
		// Not a duplicate: it would pass one of the tenant's quotas.
		u, uerr := dbsqlc.New(db).UsageOf(ctx, n.Tenant)
		if uerr != nil {
			return nil, false, fmt.Errorf("read usage of tenant %s: %w", n.Tenant, uerr)
		}
		// The quota counts the data as Postgres prints it (jsonb's text, spaced), which
		// is longer than compact JSON by less than its length.
		if n.MaxTenantEventBytes > 0 && u.EventBytes+2*int64(len(data)) > n.MaxTenantEventBytes {
			return nil, false, &QuotaError{Message: fmt.Sprintf(
				"event %s of %d bytes would pass the limit of tenant %s, whose events hold %d bytes of at most %d (STEPGATE_MAX_TENANT_EVENT_BYTES); nothing was stored; events are deleted by retention",
				n.Name, len(data), n.Tenant, u.EventBytes, n.MaxTenantEventBytes)}
		}
		if n.MaxTenantJournalBytes > 0 && u.JournalBytes >= n.MaxTenantJournalBytes {
			return nil, false, &QuotaError{Message: fmt.Sprintf(
				"event %s would start runs, but the finished runs of tenant %s hold %d bytes of journal, its limit of %d (STEPGATE_MAX_TENANT_JOURNAL_BYTES); nothing was stored",
				n.Name, n.Tenant, u.JournalBytes, n.MaxTenantJournalBytes)}
		}
		return nil, false, &QuotaError{Message: fmt.Sprintf(
			"event %s would start runs past the limit of tenant %s, which stores %d runs of at most %d (STEPGATE_MAX_TENANT_RUNS); nothing was stored",
			n.Name, n.Tenant, u.Runs, n.MaxTenantRuns)}
	}
	if err != nil {
		return nil, false, err
	}
	return ev, false, nil
}

// getEvent returns the tenant's event, or ErrNotFound.
func getEvent(ctx context.Context, db DB, tenant, id string) (*Event, error) {
	row, err := dbsqlc.New(db).EventGet(ctx, dbsqlc.EventGetParams{Tenant: tenant, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	var ev *Event
	if err == nil {
		ev, err = eventOf(row)
	}
	if err != nil {
		return nil, fmt.Errorf("get event %s: %w", id, err)
	}
	return ev, nil
}

// EventFilter selects events for ListEvents. Zero fields do not filter.
type EventFilter struct {
	Name  string
	After *Cursor // The page after this position.
	Limit int     // Defaults to 50.
	// MaxBytes ends the page once its events' data pass it (a page has one event at
	// least). Defaults to 8 MiB.
	MaxBytes int64
}

// ListEvents returns the tenant's events newest first, at most f.Limit of them and no
// more than f.MaxBytes of data past the first, and the cursor of the next page (nil on
// the last page). It reads the rows one at a time, so its memory is the page's.
func ListEvents(ctx context.Context, db DB, tenant string, f EventFilter) ([]Event, *Cursor, error) {
	limit := pageLimit(f.Limit)
	budget := cmp.Or(f.MaxBytes, 8<<20)
	afterT, afterID := f.After.keyset()
	// Read a row at a time, not collected as sqlc's method does.
	rows, _ := db.Query(ctx, dbsqlc.EventList, dbsqlc.EventListParams{
		Tenant: tenant, Name: f.Name, AfterCreatedAt: afterT, AfterID: afterID, Max: int64(limit) + 1}.Args()...)
	defer rows.Close()
	events, limit, err := readPage(rows, limit, budget, func(rows pgx.Rows) (Event, int64, error) {
		var r dbsqlc.EventGetRow
		if err := rows.Scan(&r.Tenant, &r.ID, &r.Name, &r.Data, &r.Identity, &r.SourceRunID, &r.Runs, &r.Skipped, &r.CreatedAt); err != nil {
			return Event{}, 0, err
		}
		ev, err := eventOf(r)
		if err != nil {
			return Event{}, 0, err
		}
		return *ev, int64(len(ev.Data)), nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list events: %w", err)
	}
	events, next := cutPage(events, limit, func(e Event) Cursor { return Cursor{e.CreatedAt, e.ID} })
	return events, next, nil
}

// eventOf is the event a row holds. Its JSON columns are decoded as pgx decodes them
// into Event's fields: SQL NULL leaves a field zero.
func eventOf(r dbsqlc.EventGetRow) (*Event, error) {
	ev := &Event{
		Tenant: r.Tenant, ID: r.ID, Name: r.Name, Data: r.Data, SourceRunID: r.SourceRunID, Runs: r.Runs,
		CreatedAt: r.CreatedAt,
	}
	if err := json.Unmarshal(r.Identity, &ev.Identity); err != nil {
		return nil, fmt.Errorf("decode identity of event %s: %w", r.ID, err)
	}
	if r.Skipped != nil {
		if err := json.Unmarshal(r.Skipped, &ev.Skipped); err != nil {
			return nil, fmt.Errorf("decode skipped of event %s: %w", r.ID, err)
		}
	}
	return ev, nil
}
