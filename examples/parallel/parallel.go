// Package parallel is the README's steps run at once: quotes.cheapest asks two
// suppliers for a price, in two steps that run at the same time, and takes the lower.
package parallel

import (
	"context"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

// quoteA and quoteB stand for the suppliers' price lists.
func quoteA(ctx context.Context, sku string) (int, error) { return 120 + len(sku), nil }
func quoteB(ctx context.Context, sku string) (int, error) { return 95 + len(sku), nil }

// Register adds quotes.cheapest to app.
func Register(app *functions.App) {
	functions.Register(app, "quotes.cheapest", cheapest)
}

func cheapest(ctx context.Context, sku string) (int, error) {
	// docs:begin go
	a := step.Go(ctx, "price from A", func(ctx context.Context) (int, error) { return quoteA(ctx, sku) })
	b := step.Go(ctx, "price from B", func(ctx context.Context) (int, error) { return quoteB(ctx, sku) })
	prices, err := step.All(a, b) // both run at once; prices in the order given
	// docs:end go
	if err != nil {
		return 0, err
	}
	return min(prices[0], prices[1]), nil
}
