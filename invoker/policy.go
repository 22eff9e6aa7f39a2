package invoker

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/output"
	"github.com/stepgate/stepgate/journal/usage"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
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
	// RunTimeout bounds a run from its creation (its deadline); 0 for none.
	RunTimeout time.Duration
	// Retention is how long the revision's finished runs are kept; 0 for the gateway's
	// default (STEPGATE_RETENTION).
	Retention time.Duration
	// MaxInvocationDuration is what the SDK allows one invocation before it suspends
	// the run with a continue; 0 for none. The gateway only checks it.
	MaxInvocationDuration time.Duration
	// Flow is the function's throttle, rate limit and debounce; nil for none.
	Flow *Flow
	// Concurrency bounds how many runs of the revision run at once; none when empty.
	Concurrency []ConcurrencyLimit
	// Duplex says the function's SDK speaks the duplex mode (config.modes holds
	// "duplex"): its checkpoints travel on the invocation's own connection.
	Duplex bool
}

// CheckPriority says what is wrong with p as a run priority named field, or nil when it
// is one of journal.MinPriority (first) to journal.MaxPriority (last).
func CheckPriority(field string, p int) error {
	if p < journal.MinPriority || p > journal.MaxPriority {
		return fmt.Errorf("%s %d is not a priority from %d (first) to %d (last)", field, p, journal.MinPriority, journal.MaxPriority)
	}
	return nil
}

// MaxDeadline bounds a run's deadline, and a function's run_timeout, from now.
const MaxDeadline = 10 * 365 * 24 * time.Hour

// MinMaxInvocationDuration is the least max_invocation_duration of a function's config.
const MinMaxInvocationDuration = 100 * time.Millisecond

// MinRetention is the shortest config.retention: finished runs are kept at least that
// long.
const MinRetention = time.Minute

// ParseConfig reads a function's stored or submitted config, applying defaults, and
// says what is wrong with it in words fit for an API error.
func ParseConfig(raw json.RawMessage) (FunctionConfig, error) {
	var c protocol.FunctionConfig
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
	if c.RunTimeout != nil {
		d, err := time.ParseDuration(*c.RunTimeout)
		if err != nil || d < time.Second || d > MaxDeadline {
			return FunctionConfig{}, fmt.Errorf("config.run_timeout %q is not a duration from 1s to %s (10 years), such as 1h", *c.RunTimeout, MaxDeadline)
		}
		fc.RunTimeout = d
	}
	if c.Retention != nil {
		d, err := time.ParseDuration(*c.Retention)
		if err != nil || d < MinRetention || d > MaxDeadline {
			return FunctionConfig{}, fmt.Errorf("config.retention %q is not a duration from %s to %s (10 years), such as 720h", *c.Retention, MinRetention, MaxDeadline)
		}
		fc.Retention = d
	}
	if c.MaxInvocationDuration != nil {
		d, err := time.ParseDuration(*c.MaxInvocationDuration)
		if err != nil || d < MinMaxInvocationDuration {
			return FunctionConfig{}, fmt.Errorf("config.max_invocation_duration %q is not a duration of at least %s, such as 50s", *c.MaxInvocationDuration, MinMaxInvocationDuration)
		}
		if d > fc.Timeout {
			return FunctionConfig{}, fmt.Errorf("config.max_invocation_duration %s is longer than config.timeout %s", d, fc.Timeout)
		}
		fc.MaxInvocationDuration = d
	}
	var err error
	fc.Retries, err = ParseRetryPolicy(c.Retries, RetryPolicy{
		MaxAttempts: DefaultMaxAttempts, InitialInterval: DefaultInitialInterval, MaxInterval: DefaultMaxInterval,
	})
	if err != nil {
		return FunctionConfig{}, fmt.Errorf("config.retries: %w", err)
	}
	if fc.Flow, err = parseFlow(c); err != nil {
		return FunctionConfig{}, err
	}
	if c.Priority != nil {
		if err := CheckPriority("config.priority", *c.Priority); err != nil {
			return FunctionConfig{}, err
		}
	}
	if fc.Concurrency, err = parseConcurrency(c.Concurrency); err != nil {
		return FunctionConfig{}, err
	}
	if c.Modes != nil {
		for i, m := range *c.Modes {
			if !m.Valid() {
				return FunctionConfig{}, fmt.Errorf("config.modes[%d] %q is not \"request\" or \"duplex\"", i, m)
			}
			fc.Duplex = fc.Duplex || m == protocol.FunctionConfigModesDuplex
		}
	}
	if c.Triggers != nil {
		for i, t := range *c.Triggers {
			if err := names.Check(fmt.Sprintf("config.triggers[%d].event", i), t.Event); err != nil {
				return FunctionConfig{}, err
			}
		}
	}
	return fc, nil
}

// ParseRetryPolicy applies p's fields over def.
func ParseRetryPolicy(p *protocol.RetryPolicy, def RetryPolicy) (RetryPolicy, error) {
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

// Limits bound what a function may ask of the gateway and what its runs may hold. A
// zero field takes its default; see [Limits.WithDefaults].
type Limits struct {
	// MaxTimeout caps a function's invocation timeout. Defaults to 15m.
	MaxTimeout time.Duration
	// MaxAttempts caps a function's and a step's attempts. Defaults to 100.
	MaxAttempts int
	// MinBackoff is the least initial_interval of a retry policy. Defaults to 100ms.
	MinBackoff time.Duration
	// MaxBackoff caps max_interval. Defaults to 24h.
	MaxBackoff time.Duration
	// MaxOutputBytes caps a journal entry's output (and error), and a run's output.
	// Defaults to 4 MiB.
	MaxOutputBytes int
	// MaxEntries caps a run's journal entries. Defaults to 1,000.
	MaxEntries int
	// MaxJournalBytes caps the bytes of a run's journal. Defaults to 32 MiB.
	MaxJournalBytes int64
	// MaxChunkBytes caps one chunk of a run's stream. Defaults to 64 KiB.
	MaxChunkBytes int
	// MaxStreamChunks caps the chunks of one stream. Defaults to 100,000.
	MaxStreamChunks int
	// MaxStreamBytes caps the bytes of one stream's chunks. Defaults to 16 MiB.
	MaxStreamBytes int64
	// MaxRunStreams caps the streams of one run. Defaults to 100.
	MaxRunStreams int
	// MaxTenantRuns caps the runs one tenant stores (not yet deleted by retention):
	// a start past it is refused with a *journal.QuotaError. Defaults to 1,000,000.
	MaxTenantRuns int64
	// MaxTenantStreamBytes caps the bytes of all the streams of one tenant's runs.
	// Defaults to 10 GiB.
	MaxTenantStreamBytes int64
	// MaxTenantMailboxBytes caps the bytes of one tenant's messages not yet received.
	// Defaults to 1 GiB.
	MaxTenantMailboxBytes int64
	// MaxTenantEventBytes caps the bytes of one tenant's events' data (not yet deleted
	// by retention): an event past it is refused. Defaults to 1 GiB.
	MaxTenantEventBytes int64
	// MaxTenantJournalBytes caps the journal bytes of one tenant's finished runs (not yet
	// deleted by retention), counted as each run finishes: once they reach it, a start is
	// refused. Defaults to 10 GiB.
	MaxTenantJournalBytes int64
}

// Limits' defaults.
const (
	DefaultMaxTimeout      = 15 * time.Minute
	DefaultAttemptsCap     = 100
	DefaultMinBackoff      = 100 * time.Millisecond
	DefaultMaxBackoff      = 24 * time.Hour
	DefaultMaxOutputBytes  = 4 << 20
	DefaultMaxEntries      = 1000
	DefaultMaxJournalBytes = 32 << 20
	DefaultMaxChunkBytes   = 64 << 10
	DefaultMaxStreamChunks = 100_000
	DefaultMaxStreamBytes  = 16 << 20
	DefaultMaxRunStreams   = 100

	DefaultMaxTenantRuns         = 1_000_000
	DefaultMaxTenantStreamBytes  = 10 << 30
	DefaultMaxTenantMailboxBytes = 1 << 30
	DefaultMaxTenantEventBytes   = 1 << 30
	DefaultMaxTenantJournalBytes = 10 << 30
)

// MaxConfigListLen bounds a config's invoke_roles, resume_roles and triggers.
const MaxConfigListLen = 100

// WithDefaults returns l with its zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	l.MaxTimeout = cmp.Or(l.MaxTimeout, DefaultMaxTimeout)
	l.MaxAttempts = cmp.Or(l.MaxAttempts, DefaultAttemptsCap)
	l.MinBackoff = cmp.Or(l.MinBackoff, DefaultMinBackoff)
	l.MaxBackoff = cmp.Or(l.MaxBackoff, DefaultMaxBackoff)
	l.MaxOutputBytes = cmp.Or(l.MaxOutputBytes, DefaultMaxOutputBytes)
	l.MaxEntries = cmp.Or(l.MaxEntries, DefaultMaxEntries)
	l.MaxJournalBytes = cmp.Or(l.MaxJournalBytes, DefaultMaxJournalBytes)
	l.MaxChunkBytes = cmp.Or(l.MaxChunkBytes, DefaultMaxChunkBytes)
	l.MaxStreamChunks = cmp.Or(l.MaxStreamChunks, DefaultMaxStreamChunks)
	l.MaxStreamBytes = cmp.Or(l.MaxStreamBytes, DefaultMaxStreamBytes)
	l.MaxRunStreams = cmp.Or(l.MaxRunStreams, DefaultMaxRunStreams)
	l.MaxTenantRuns = cmp.Or(l.MaxTenantRuns, DefaultMaxTenantRuns)
	l.MaxTenantStreamBytes = cmp.Or(l.MaxTenantStreamBytes, DefaultMaxTenantStreamBytes)
	l.MaxTenantMailboxBytes = cmp.Or(l.MaxTenantMailboxBytes, DefaultMaxTenantMailboxBytes)
	l.MaxTenantEventBytes = cmp.Or(l.MaxTenantEventBytes, DefaultMaxTenantEventBytes)
	l.MaxTenantJournalBytes = cmp.Or(l.MaxTenantJournalBytes, DefaultMaxTenantJournalBytes)
	return l
}

// Bounds returns the journal's share of l.
func (l Limits) Bounds() journal.Bounds {
	return journal.Bounds{MaxEntries: l.MaxEntries, MaxEntryBytes: int64(l.MaxOutputBytes), MaxJournalBytes: l.MaxJournalBytes}
}

// Quotas returns the tenants' storage quotas of l.
func (l Limits) Quotas() usage.Quotas {
	return usage.Quotas{MaxRuns: l.MaxTenantRuns, MaxStreamBytes: l.MaxTenantStreamBytes, MaxMailboxBytes: l.MaxTenantMailboxBytes,
		MaxEventBytes: l.MaxTenantEventBytes, MaxJournalBytes: l.MaxTenantJournalBytes}
}

// StreamBounds returns the streams' share of l.
func (l Limits) StreamBounds() output.StreamBounds {
	return output.StreamBounds{MaxChunkBytes: l.MaxChunkBytes, MaxChunks: l.MaxStreamChunks, MaxBytes: l.MaxStreamBytes, MaxStreams: l.MaxRunStreams,
		MaxTenantBytes: l.MaxTenantStreamBytes}
}

// CheckConfig says what in a function's config, as registered, passes l, in words fit
// for an API error that name the limit: fc is c parsed by [ParseConfig].
func (l Limits) CheckConfig(c protocol.FunctionConfig, fc FunctionConfig) error {
	switch {
	case fc.Timeout > l.MaxTimeout:
		return fmt.Errorf("config.timeout %s is longer than the gateway's limit of %s (STEPGATE_MAX_FUNCTION_TIMEOUT)", fc.Timeout, l.MaxTimeout)
	case fc.Retries.MaxAttempts > l.MaxAttempts:
		return fmt.Errorf("config.retries.max_attempts %d is more than the gateway's limit of %d (STEPGATE_MAX_ATTEMPTS)", fc.Retries.MaxAttempts, l.MaxAttempts)
	case c.Retries != nil && c.Retries.InitialInterval != nil && fc.Retries.InitialInterval < l.MinBackoff:
		return fmt.Errorf("config.retries.initial_interval %s is shorter than the gateway's floor of %s (STEPGATE_MIN_BACKOFF)", fc.Retries.InitialInterval, l.MinBackoff)
	case fc.Retries.MaxInterval > l.MaxBackoff:
		return fmt.Errorf("config.retries.max_interval %s is longer than the gateway's limit of %s", fc.Retries.MaxInterval, l.MaxBackoff)
	case c.InvokeRoles != nil && len(*c.InvokeRoles) > MaxConfigListLen:
		return fmt.Errorf("config.invoke_roles has %d roles, more than the limit of %d", len(*c.InvokeRoles), MaxConfigListLen)
	case c.ResumeRoles != nil && len(*c.ResumeRoles) > MaxConfigListLen:
		return fmt.Errorf("config.resume_roles has %d roles, more than the limit of %d", len(*c.ResumeRoles), MaxConfigListLen)
	case c.Triggers != nil && len(*c.Triggers) > MaxConfigListLen:
		return fmt.Errorf("config.triggers has %d triggers, more than the limit of %d", len(*c.Triggers), MaxConfigListLen)
	}
	for field, roles := range map[string]*[]string{"invoke_roles": c.InvokeRoles, "resume_roles": c.ResumeRoles} {
		if roles == nil {
			continue
		}
		for i, r := range *roles {
			if err := names.Check(fmt.Sprintf("config.%s[%d]", field, i), r); err != nil {
				return err
			}
		}
	}
	return nil
}

// clamp brings a stored config within l, which may be stricter than when it was
// registered.
func (l Limits) clamp(fc FunctionConfig) FunctionConfig {
	fc.Timeout = min(fc.Timeout, l.MaxTimeout)
	fc.Retries = l.clampRetry(fc.Retries)
	return fc
}

// clampRetry brings a retry policy, a function's or a step's, within l: what a function
// claims in an answer never buys more attempts or faster retries than l allows.
func (l Limits) clampRetry(p RetryPolicy) RetryPolicy {
	p.MaxAttempts = max(1, min(p.MaxAttempts, l.MaxAttempts))
	p.InitialInterval = max(p.InitialInterval, l.MinBackoff)
	p.MaxInterval = min(max(p.MaxInterval, p.InitialInterval), l.MaxBackoff)
	return p
}
