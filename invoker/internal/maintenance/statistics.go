package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal"
)

// StatisticsEvery is how often, at most, the Statistics service looks for grown tables.
const StatisticsEvery = 10 * time.Second

// Statistics keeps the statistics of the hot tables up with a new database's growth
// (see journal.AnalyzeGrown): at the first maintenance pass, then at the first pass
// more than StatisticsEvery after the last look, by its clock.
type Statistics struct {
	pool    *pgxpool.Pool
	log     *slog.Logger
	clock   clock.Clock
	checked time.Time // when it last looked for grown tables to analyze
}

// NewStatistics returns the Statistics service of pool's tables.
func NewStatistics(pool *pgxpool.Pool, log *slog.Logger, clk clock.Clock) *Statistics {
	return &Statistics{pool: pool, log: log, clock: clk}
}

// Pass analyzes the grown tables when StatisticsEvery has passed since the last look,
// and logs its error (a later pass retries). Not safe for concurrent use: one loop calls
// it.
func (s *Statistics) Pass(ctx context.Context) {
	if s.clock.Now().Sub(s.checked) <= StatisticsEvery {
		return
	}
	s.checked = s.clock.Now()
	if _, err := journal.AnalyzeGrown(ctx, s.pool); err != nil && ctx.Err() == nil {
		s.log.Warn("analyzing grown tables failed; a later pass retries", slog.Any("error", err))
	}
}
