package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal"
)

// UsageFoldEvery is how often, at most, a gateway folds the usage rows of ended database
// connections, and UsageFoldBatch how many rows one fold moves at most.
const (
	UsageFoldEvery = time.Minute
	UsageFoldBatch = 1000
)

// UsageFolder folds the tenant-usage rows of database connections that have ended into
// their tenants' rows of stripe 0 (journal.FoldUsage): at the first maintenance pass,
// then at the first pass more than UsageFoldEvery after the last fold; about once a
// minute per gateway.
type UsageFolder struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	clock  clock.Clock
	folded time.Time // when it last folded
}

// NewUsageFolder returns the UsageFolder of pool's tenant usage.
func NewUsageFolder(pool *pgxpool.Pool, log *slog.Logger, clk clock.Clock) *UsageFolder {
	return &UsageFolder{pool: pool, log: log, clock: clk}
}

// Pass folds up to UsageFoldBatch rows when UsageFoldEvery has passed since the last
// fold, and logs its error (a later pass retries). Not safe for concurrent use: one loop
// calls it.
func (f *UsageFolder) Pass(ctx context.Context) {
	if f.clock.Now().Sub(f.folded) <= UsageFoldEvery {
		return
	}
	f.folded = f.clock.Now()
	if _, err := journal.FoldUsage(ctx, f.pool, UsageFoldBatch); err != nil && ctx.Err() == nil {
		f.log.Warn("folding tenant usage failed; a later pass retries", slog.Any("error", err))
	}
}
