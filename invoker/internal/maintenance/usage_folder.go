package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal/usage"
)

// UsageFoldEvery is how often, at most, a gateway folds the usage rows of ended database
// connections, and UsageFoldBatch how many rows one fold moves at most.
const (
	UsageFoldEvery = time.Minute
	UsageFoldBatch = 1000
)

// UsageFolder folds the tenant-usage rows of database connections that have ended into
// their tenants' rows of stripe 0 (usage.FoldUsage): at the first maintenance pass,
// then at the first pass more than UsageFoldEvery after the last fold, by its clock;
// about once a minute per gateway. Its Pass logs an error (a later pass retries); it is
// not safe for concurrent use: one loop calls it.
type UsageFolder struct{ throttled }

// NewUsageFolder returns the UsageFolder of pool's tenant usage.
func NewUsageFolder(pool *pgxpool.Pool, log *slog.Logger, clk clock.Clock) *UsageFolder {
	return &UsageFolder{throttled{every: UsageFoldEvery, clock: clk, log: log, what: "folding tenant usage",
		work: func(ctx context.Context) error {
			_, err := usage.FoldUsage(ctx, pool, UsageFoldBatch)
			return err
		}}}
}
