// Package runevents holds the notifications of runs' status changes that gateways
// stream: the channel, its payload, and the watches that turn them on per tenant.
package runevents

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// EventChannel is the Postgres channel on which every statement that inserts runs or
// changes their status announces each change as a [RunEvent] in JSON, but only while
// some gateway watches the run's tenant (see [Watch]): a NOTIFY serializes commits, so
// runs nobody watches pay one index lookup and no notification. Triggers on
// stepgate.run send them (run_event_on_insert and run_event_on_status; docs/internals.md), whoever writes the run.
const EventChannel = "stepgate_run_events"

// RunEvent is a run's status change, as notified on EventChannel. It is small and
// bounded (a notification holds at most 8000 bytes): no input, output or error.
type RunEvent struct {
	ID       string         `json:"id"`
	Tenant   string         `json:"tenant"`
	Function string         `json:"function"`
	Status   journal.Status `json:"status"`
	// Invocations, FailedInvocations and Recoveries are the run's counts (see journal.Run).
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
func Watch(ctx context.Context, db journal.DB, gatewayID string, tenants []string, ttl time.Duration) error {
	err := dbsqlc.New(db).RunEventWatch(ctx, dbsqlc.RunEventWatchParams{GatewayID: gatewayID, Tenants: tenants, TtlSecs: ttl.Seconds()})
	if err != nil {
		return fmt.Errorf("watch run events: %w", err)
	}
	return nil
}

// Unwatch removes the gateway's watch of tenant; other gateways' watches stay.
func Unwatch(ctx context.Context, db journal.DB, gatewayID, tenant string) error {
	if err := dbsqlc.New(db).RunEventUnwatch(ctx, dbsqlc.RunEventUnwatchParams{GatewayID: gatewayID, Tenant: tenant}); err != nil {
		return fmt.Errorf("unwatch run events: %w", err)
	}
	return nil
}
