package invoker

import (
	"fmt"
	"regexp"

	"github.com/stepgate/stepgate/protocol"
)

// Concurrency limits: a function's config may bound how many of its runs run at once,
// in all and per key value (config.concurrency). Postgres enforces them across gateways
// (journal.ClaimRunSlots; docs/concurrency.md); the invoker picks that claim for the runs of
// revisions with limits, and wakes the held runs a freed slot makes due (SlotChannel).

// Bounds of a function's concurrency limits.
const (
	MaxConcurrencyLimits = 2
	MaxConcurrency       = 100_000
	maxKeyBytes          = 200
)

// ConcurrencyLimit is one of a function's concurrency limits.
type ConcurrencyLimit struct {
	Limit int
	Key   string // "" for the function-wide limit; else e.g. "input.customer_id"
}

// keyExpr is what a concurrency key may say: a dotted path into the run's input, or its
// identity's subject, tenant or one of its claims.
var keyExpr = regexp.MustCompile(`^(input(\.[A-Za-z0-9_-]+)+|identity\.subject|identity\.tenant|identity\.claims(\.[A-Za-z0-9_-]+)+)$`)

// parseConcurrency checks a config's concurrency limits, in words that name the field.
func parseConcurrency(cs *[]protocol.ConcurrencyLimit) ([]ConcurrencyLimit, error) {
	if cs == nil {
		return nil, nil
	}
	if len(*cs) > MaxConcurrencyLimits {
		return nil, fmt.Errorf("config.concurrency has %d limits, more than the limit of %d", len(*cs), MaxConcurrencyLimits)
	}
	out := make([]ConcurrencyLimit, 0, len(*cs))
	for i, c := range *cs {
		if c.Limit < 1 || c.Limit > MaxConcurrency {
			return nil, fmt.Errorf("config.concurrency[%d].limit %d is not between 1 and %d", i, c.Limit, MaxConcurrency)
		}
		l := ConcurrencyLimit{Limit: c.Limit}
		if c.Key != nil {
			l.Key = *c.Key
			if len(l.Key) > maxKeyBytes || !keyExpr.MatchString(l.Key) {
				return nil, fmt.Errorf("config.concurrency[%d].key %q is not a key such as input.customer_id, identity.subject, identity.tenant "+
					"or identity.claims.org (a dotted path of letters, digits, _ and -, at most %d bytes)", i, clipKey(l.Key), maxKeyBytes)
			}
		}
		for j, prev := range out {
			if prev.Key == l.Key {
				return nil, fmt.Errorf("config.concurrency[%d].key repeats the key of config.concurrency[%d]: one limit per key", i, j)
			}
		}
		out = append(out, l)
	}
	return out, nil
}

func clipKey(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
