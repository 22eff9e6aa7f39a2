package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// KindEvent is the journal entry of an event a run sent (step.SendEvent): its output is
// the event's {name, data, id}. It is checkpointed like a step, and the checkpoint
// stores the event (see SendEvent) in the entry's transaction.
const KindEvent = "event"

// Event is a named JSON payload sent by a tenant, through the API or from a run. Events
// are immutable; (Tenant, ID) is unique.
type Event struct {
	Tenant   string          `db:"tenant"`
	ID       string          `db:"id"`
	Name     string          `db:"name"`
	Data     json.RawMessage `db:"data"`
	Identity Identity        `db:"identity"` // The sender's.
	// SourceRunID is the run that sent the event; nil for one sent through the API.
	SourceRunID *string  `db:"source_run_id"`
	Runs        []string `db:"runs"` // The runs the event started, by function name.
	// Skipped are the functions its triggers did not start (a rate limit), and why.
	Skipped   []SkippedStart `db:"skipped"`
	CreatedAt time.Time      `db:"created_at"`
	// Flowed are the functions with flow control its triggers name, when it was just
	// sent: SendEvent starts none of them; the caller does, through their flow control
	// (see CompleteEvent).
	Flowed []string `db:"-"`
	// Held are the runs the caller started for Flowed that flow control scheduled, for
	// it to arm their wake-ups once the event commits; not stored.
	Held []*Run `db:"-"`
	// Resumed are the waiting runs the event resumed (ResumeWaiters), when it was
	// just sent; not stored with the event (each run's journal names it).
	Resumed []string `db:"-"`
}

const eventColumns = `tenant, id, name, data, identity, source_run_id::text, runs::text[], skipped, created_at`

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
	// MaxTenantRuns caps the runs the tenant stores (Quotas.MaxRuns): an event whose
	// triggers would start runs past it is not stored, and SendEvent returns a
	// *QuotaError. 0 does not limit.
	MaxTenantRuns int64
}

// SendEvent stores an event of the tenant and, when its id is new, starts a queued run of
// each of the tenant's functions whose current revision has a trigger with the event's
// exact name (config.triggers[].event), with the event's data as input and its
// identity, all in one statement. It returns the event and created=true; the caller
// enqueues the invocation of each of ev.Runs in the same transaction. When the tenant
// already has an event with that id, it returns that first event and created=false,
// and starts nothing. The functions with flow control it triggers are not started but
// named in ev.Flowed. Concurrent sends of one id wait for each other: one wins. Each
// run created notifies EventChannel when a gateway watches the tenant. A new event whose
// triggers would start runs past n.MaxTenantRuns is refused whole with a *QuotaError.
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
	// Run ids are UUIDv7, as the gateway makes them, for the index locality of time
	// order. targets is materialized (a volatile CTE read twice), so the event's runs
	// are the runs inserted.
	rows, _ := db.Query(ctx, `
		WITH targets AS MATERIALIZED (
			SELECT f.name, f.revision, r.run_timeout_ms,
				coalesce((r.config->>'priority')::smallint, 2) AS priority, -- 2: DefaultPriority
				r.config ?| `+flowKeys+` AS flowed,
				encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
				placing substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
				FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid AS run_id
			FROM stepgate.function f
			JOIN stepgate.function_revision r USING (tenant, name, revision)
			WHERE f.tenant = $1
			  AND r.config->'triggers' @> jsonb_build_array(jsonb_build_object('event', $3::text))
			  AND stepgate.may_invoke(r.config, $7, $8::text[])
		), ins AS (
			INSERT INTO stepgate.event (tenant, id, name, data, identity, source_run_id, runs)
			SELECT $1, $2, $3, $4, $5, $6, coalesce(array_agg(run_id ORDER BY name) FILTER (WHERE NOT flowed), '{}') FROM targets
			HAVING $9::bigint <= 0 OR count(*) FILTER (WHERE NOT flowed) = 0
				OR `+fmt.Sprintf(usageSum, "runs", "$1")+` + count(*) FILTER (WHERE NOT flowed) <= $9::bigint
			ON CONFLICT (tenant, id) DO NOTHING
			RETURNING `+eventColumns+`
		), runs AS (
			INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, deadline, priority)
			SELECT t.run_id, $1, t.name, t.revision, 'queued', $4, $5, now() + t.run_timeout_ms * interval '1 millisecond', t.priority
			FROM targets t WHERE NOT t.flowed AND EXISTS (SELECT 1 FROM ins)
			RETURNING id, tenant, function, status, attempts, wake_at, finished_at
		)
		SELECT ins.*, ARRAY(SELECT name FROM targets WHERE flowed ORDER BY name) AS flowed FROM ins`,
		n.Tenant, n.ID, n.Name, data, n.Identity, n.SourceRunID, !n.Identity.IsAdmin(), roles, n.MaxTenantRuns)
	type sent struct {
		Event
		Flowed []string `db:"flowed"`
	}
	s, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[sent])
	if err == nil {
		if len(s.Flowed) > 0 {
			s.Event.Flowed = s.Flowed
		}
		return &s.Event, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("send event %s: %w", n.Name, unstorable(err))
	}
	ev, err = GetEvent(ctx, db, n.Tenant, n.ID)
	if errors.Is(err, ErrNotFound) && n.MaxTenantRuns > 0 {
		// Not a duplicate: its runs would pass the tenant's quota.
		u, uerr := TenantUsageOf(ctx, db, n.Tenant)
		if uerr != nil {
			return nil, false, uerr
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

// GetEvent returns the tenant's event, or ErrNotFound.
func GetEvent(ctx context.Context, db DB, tenant, id string) (*Event, error) {
	rows, _ := db.Query(ctx, `SELECT `+eventColumns+` FROM stepgate.event WHERE tenant = $1 AND id = $2`, tenant, id)
	ev, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Event])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
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
}

// ListEvents returns the tenant's events newest first, at most f.Limit of them, and the
// cursor of the next page (nil on the last page).
func ListEvents(ctx context.Context, db DB, tenant string, f EventFilter) ([]Event, *Cursor, error) {
	limit := pageLimit(f.Limit)
	afterT, afterID := f.After.keyset()
	rows, _ := db.Query(ctx, `
		SELECT `+eventColumns+` FROM stepgate.event
		WHERE tenant = $1
		  AND ($2 = '' OR name = $2)
		  AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4::text))
		ORDER BY created_at DESC, id DESC
		LIMIT $5`,
		tenant, f.Name, afterT, afterID, limit+1)
	events, err := pgx.CollectRows(rows, pgx.RowToStructByName[Event])
	if err != nil {
		return nil, nil, fmt.Errorf("list events: %w", err)
	}
	events, next := cutPage(events, limit, func(e Event) Cursor { return Cursor{e.CreatedAt, e.ID} })
	return events, next, nil
}
