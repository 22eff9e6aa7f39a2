package invoker

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stepgate/stepgate/gateway/api"
)

// Defaults of a function's config.
const (
	DefaultTimeout         = 5 * time.Minute
	DefaultMaxAttempts     = 3
	DefaultInitialInterval = time.Second
	DefaultMaxInterval     = time.Minute
)

// RetryPolicy bounds how often and how soon a failed invocation or step is retried.
type RetryPolicy struct {
	MaxAttempts     int           // Attempts in all, the first included.
	InitialInterval time.Duration // The backoff before the first retry, before jitter.
	MaxInterval     time.Duration // The backoff's cap, before jitter.
}

// Backoff returns the wait after the given failed attempt (1 for the first): the
// exponential interval min(MaxInterval, InitialInterval * 2^(attempt-1)) with equal
// jitter, a random duration between half of it and all of it, so that retries of many
// runs that failed together spread out.
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	d := p.InitialInterval
	for i := 1; i < attempt && d < p.MaxInterval; i++ {
		if d > p.MaxInterval/2 {
			d = p.MaxInterval // doubling would pass the cap, or overflow for a cap near the largest Duration
			break
		}
		d *= 2
	}
	d = min(d, p.MaxInterval)
	if d <= 0 {
		return 0
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// FunctionConfig is a revision's config with its defaults applied.
type FunctionConfig struct {
	Timeout time.Duration
	Retries RetryPolicy
}

// ParseConfig reads a function's stored or submitted config, applying defaults, and
// says what is wrong with it in words fit for an API error.
func ParseConfig(raw json.RawMessage) (FunctionConfig, error) {
	var c api.FunctionConfig
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &c); err != nil {
			return FunctionConfig{}, fmt.Errorf("config is not valid: %w", err)
		}
	}
	fc := FunctionConfig{Timeout: DefaultTimeout}
	if c.Timeout != nil {
		d, err := time.ParseDuration(*c.Timeout)
		if err != nil || d <= 0 {
			return FunctionConfig{}, fmt.Errorf("config.timeout %q is not a positive duration such as 30s", *c.Timeout)
		}
		fc.Timeout = d
	}
	var err error
	fc.Retries, err = ParseRetryPolicy(c.Retries, RetryPolicy{
		MaxAttempts: DefaultMaxAttempts, InitialInterval: DefaultInitialInterval, MaxInterval: DefaultMaxInterval,
	})
	if err != nil {
		return FunctionConfig{}, fmt.Errorf("config.retries: %w", err)
	}
	if c.Triggers != nil {
		for i, t := range *c.Triggers {
			if t.Event == "" || len(t.Event) > 255 {
				return FunctionConfig{}, fmt.Errorf("config.triggers[%d].event %q must be 1 to 255 bytes", i, t.Event)
			}
		}
	}
	return fc, nil
}

// ParseRetryPolicy applies p's fields over def.
func ParseRetryPolicy(p *api.RetryPolicy, def RetryPolicy) (RetryPolicy, error) {
	if p == nil {
		return def, nil
	}
	if p.MaxAttempts != nil {
		if *p.MaxAttempts < 1 {
			return RetryPolicy{}, fmt.Errorf("max_attempts must be at least 1, not %d", *p.MaxAttempts)
		}
		def.MaxAttempts = *p.MaxAttempts
	}
	for _, f := range []struct {
		name string
		in   *string
		out  *time.Duration
	}{{"initial_interval", p.InitialInterval, &def.InitialInterval}, {"max_interval", p.MaxInterval, &def.MaxInterval}} {
		if f.in == nil {
			continue
		}
		d, err := time.ParseDuration(*f.in)
		if err != nil || d < 0 {
			return RetryPolicy{}, fmt.Errorf("%s %q is not a duration such as 1s", f.name, *f.in)
		}
		*f.out = d
	}
	def.MaxInterval = max(def.MaxInterval, def.InitialInterval)
	return def, nil
}
