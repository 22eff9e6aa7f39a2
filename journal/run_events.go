package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// EventChannel is the Postgres channel on which every statement that inserts runs or
// changes their status announces each change as a [RunEvent] in JSON, but only while
// some gateway watches the run's tenant (see [Watch]): a NOTIFY serializes commits, so
// runs nobody watches pay one index lookup and no notification. Triggers on
// stepgate.run send them (migration 0017), whoever writes the run.
const EventChannel = "stepgate_run_events"

// RunEvent is a run's status change, as notified on EventChannel. It is small and
// bounded (a notification holds at most 8000 bytes): no input, output or error.
type RunEvent struct {
	ID       string `json:"id"`
	Tenant   string `json:"tenant"`
	Function string `json:"function"`
	Status   Status `json:"status"`
	// Invocations, FailedInvocations and Recoveries are the run's counts (see Run).
	Invocations       int        `json:"invocations"`
	FailedInvocations int        `json:"failed_invocations"`
	Recoveries        int        `json:"recoveries"`
	WakeAt            *time.Time `json:"wake_at"`
	FinishedAt        *time.Time `json:"finished_at"`
}

// ParseRunEvent decodes an EventChannel payload.
func ParseRunEvent(payload string) (RunEvent, error) {
	var ev RunEvent
	if err := json.Unmarshal([]byte(payload), &ev); err != nil {
		return RunEvent{}, fmt.Errorf("decode run event: %w", err)
	}
	return ev, nil
}

// Watch records, until ttl from now by the database clock, that the gateway gatewayID
// streams the run events of tenants, so that their runs' status changes notify
// EventChannel. Calling it again extends the expiry; rows that expired an hour ago (a
// gateway that died) are removed on the way.
func Watch(ctx context.Context, db DB, gatewayID string, tenants []string, ttl time.Duration) error {
	_, err := db.Exec(ctx, `
		WITH pruned AS (
			DELETE FROM stepgate.run_watch WHERE expires_at < now() - interval '1 hour'
		)
		INSERT INTO stepgate.run_watch (gateway_id, tenant, expires_at)
		SELECT $1, t, now() + make_interval(secs => $3) FROM unnest($2::text[]) t
		ON CONFLICT (gateway_id, tenant) DO UPDATE SET expires_at = excluded.expires_at`,
		gatewayID, tenants, ttl.Seconds())
	if err != nil {
		return fmt.Errorf("watch run events: %w", err)
	}
	return nil
}

// Unwatch removes the gateway's watch of tenant; other gateways' watches stay.
func Unwatch(ctx context.Context, db DB, gatewayID, tenant string) error {
	if _, err := db.Exec(ctx, `DELETE FROM stepgate.run_watch WHERE gateway_id = $1 AND tenant = $2`, gatewayID, tenant); err != nil {
		return fmt.Errorf("unwatch run events: %w", err)
	}
	return nil
}

// RunsByID returns the runs with these ids that exist, in no particular order, whatever
// their tenant: the caller filters.
func RunsByID(ctx context.Context, db DB, ids []string) ([]Run, error) {
	rows, _ := db.Query(ctx, `SELECT `+runColumns+` FROM stepgate.run WHERE id = ANY($1::uuid[])`, ids)
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Run])
	if err != nil {
		return nil, fmt.Errorf("load runs: %w", err)
	}
	return runs, nil
}
