package invoker

import (
	"time"

	"github.com/stepgate/stepgate/invoker/internal/maintenance"
)

// DefaultRetention is how long finished runs are kept when neither the gateway's
// Config.Retention nor their function's config.retention says otherwise.
const DefaultRetention = 30 * 24 * time.Hour

// RetentionArgs is the periodic job that deletes what retention lets go: finished runs
// past their retention, then old events and tombstones (retention.DeleteExpiredRuns). The
// leader of the River clients inserts it every Config.RetentionInterval. Its worker is
// maintenance.Retention.
type RetentionArgs = maintenance.RetentionArgs
