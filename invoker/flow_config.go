package invoker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// Flow is a function's flow control: its throttle, rate limit and debounce, each nil
// when the config has none. A function with none of them has a nil *Flow, and its
// starts cost what they cost without flow control (see flow.go).
type Flow struct {
	Throttle  *Rate
	RateLimit *Rate
	Debounce  *Debounce
}

// Rate is a throttle's or a rate limit's rate per key: Limit starts per Period, one each
// Period/Limit, plus Burst more at once after a quiet spell (GCRA). A rate limit's Burst
// defaults to Limit-1, so that a quiet key admits Limit starts back to back; a
// throttle's to 0. MaxQueue bounds a throttle's waiting starts per key.
type Rate struct {
	Limit    int
	Period   time.Duration
	Burst    int
	Key      KeyExpr
	MaxQueue int
	period   string // As written in the config, for people.
}

// Debounce collapses the starts of one key within Period into one run, pushed back at
// most MaxWait from the first.
type Debounce struct {
	Period  time.Duration
	MaxWait time.Duration
	Key     KeyExpr
}

// Bounds of flow control's config.
const (
	MinFlowPeriod       = 10 * time.Millisecond
	MaxFlowPeriod       = 24 * time.Hour
	MaxFlowLimit        = 100_000
	DefaultMaxQueue     = 1000
	DefaultDebounceWait = 24 * time.Hour
	// MaxKeyValueBytes bounds a key's value as stored: a longer one is stored as its
	// SHA-256 ("sha256:<hex>").
	MaxKeyValueBytes = 128
)

// MaxThrottleAhead bounds how far ahead a throttle schedules a start, whatever its
// max_queue: a start it would hold longer is refused (429), as one past max_queue is.
const MaxThrottleAhead = 7 * 24 * time.Hour

// ahead is how far ahead the throttle schedules a start at most: max_queue intervals,
// or MaxThrottleAhead if less; bound says which, for people.
func (r *Rate) ahead() (time.Duration, string) {
	q := time.Duration(r.MaxQueue) * r.interval()
	if q/r.interval() != time.Duration(r.MaxQueue) || q > MaxThrottleAhead {
		return MaxThrottleAhead, fmt.Sprintf("its starts would wait more than %s (the gateway's bound)", MaxThrottleAhead)
	}
	return q, fmt.Sprintf("%d starts wait already (max_queue)", r.MaxQueue)
}

// interval is the rate's emission interval, Period/Limit: the steady gap between starts.
func (r *Rate) interval() time.Duration { return r.Period / time.Duration(r.Limit) }

// describe says the rate for people: "10 per 1s".
func (r *Rate) describe() string {
	if r.period == "" {
		return fmt.Sprintf("%d per %s", r.Limit, r.Period)
	}
	return fmt.Sprintf("%d per %s", r.Limit, r.period)
}

// KeyExpr is what a limit is counted per: a field of the run's input, or of its
// identity; the zero KeyExpr is one global key.
type KeyExpr struct {
	Expr string   // As written in the config.
	from string   // "input" or "identity"
	path []string // The fields under it.
}

// keyPath matches a key expression: input.<dotted.path>, identity.subject,
// identity.tenant or identity.claims.<name>.
var keyField = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ParseKey parses a key expression; "" is the global key.
func ParseKey(field, expr string) (KeyExpr, error) {
	if expr == "" {
		return KeyExpr{}, nil
	}
	bad := fmt.Errorf("%s %q is not a key: want input.<field>[.<field>...], identity.subject, identity.tenant or identity.claims.<name>", field, expr)
	if len(expr) > 255 {
		return KeyExpr{}, bad
	}
	parts := strings.Split(expr, ".")
	for _, p := range parts {
		if !keyField.MatchString(p) {
			return KeyExpr{}, bad
		}
	}
	switch {
	case parts[0] == "input" && len(parts) >= 2 && len(parts) <= 9:
	case parts[0] == "identity" && len(parts) == 2 && (parts[1] == "subject" || parts[1] == "tenant"):
	case parts[0] == "identity" && len(parts) == 3 && parts[1] == "claims":
	default:
		return KeyExpr{}, bad
	}
	return KeyExpr{Expr: expr, from: parts[0], path: parts[1:]}, nil
}

// Value returns the key's value for a start with input and id: a string as it is,
// another JSON value as compact JSON, "" for a missing field or null; a value longer
// than MaxKeyValueBytes as "sha256:<hex>".
func (k KeyExpr) Value(input json.RawMessage, id journal.Identity) string {
	var v any
	switch k.from {
	case "":
		return ""
	case "identity":
		switch k.path[0] {
		case "subject":
			v = id.Subject
		case "tenant":
			v = id.Tenant
		default:
			v = id.Claims[k.path[1]]
		}
	case "input":
		d := json.NewDecoder(bytes.NewReader(input))
		d.UseNumber()
		if d.Decode(&v) != nil {
			return ""
		}
		for _, p := range k.path {
			m, ok := v.(map[string]any)
			if !ok {
				return ""
			}
			v = m[p]
		}
	}
	var s string
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		s = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		s = string(b)
	}
	if len(s) > MaxKeyValueBytes {
		sum := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return s
}

// describe says the key's value for people: " (key customer_id=c-9)", "" for the
// global key.
func (k KeyExpr) describe(value string) string {
	if k.from == "" {
		return ""
	}
	return fmt.Sprintf(" (key %s=%s)", k.path[len(k.path)-1], value)
}

func parseFlowPeriod(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < MinFlowPeriod || d > MaxFlowPeriod {
		return 0, fmt.Errorf("%s %q is not a duration from %s to %s, such as 1s", field, s, MinFlowPeriod, MaxFlowPeriod)
	}
	return d, nil
}

// parseRate reads a throttle's or a rate limit's config. Without a burst, full (a rate
// limit's) makes it Limit-1: the bucket is full at the start, and Limit starts pass
// back to back; else 0, one start each Period/Limit.
func parseRate(field string, c *protocol.RateConfig, full bool) (*Rate, error) {
	if c == nil {
		return nil, nil
	}
	r := &Rate{Limit: c.Limit, MaxQueue: DefaultMaxQueue, period: c.Period}
	if full {
		r.Burst = c.Limit - 1
	}
	if c.Limit < 1 || c.Limit > MaxFlowLimit {
		return nil, fmt.Errorf("%s.limit %d is not from 1 to %d", field, c.Limit, MaxFlowLimit)
	}
	var err error
	if r.Period, err = parseFlowPeriod(field+".period", c.Period); err != nil {
		return nil, err
	}
	if r.Period/time.Duration(r.Limit) < time.Microsecond {
		return nil, fmt.Errorf("%s: %d per %s is more than one start a microsecond", field, c.Limit, r.Period)
	}
	if c.Burst != nil {
		if *c.Burst < 0 || *c.Burst > MaxFlowLimit {
			return nil, fmt.Errorf("%s.burst %d is not from 0 to %d", field, *c.Burst, MaxFlowLimit)
		}
		r.Burst = *c.Burst
	}
	if c.MaxQueue != nil {
		if *c.MaxQueue < 1 || *c.MaxQueue > MaxFlowLimit {
			return nil, fmt.Errorf("%s.max_queue %d is not from 1 to %d", field, *c.MaxQueue, MaxFlowLimit)
		}
		r.MaxQueue = *c.MaxQueue
	}
	if c.Key != nil {
		if r.Key, err = ParseKey(field+".key", *c.Key); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// parseFlow reads a config's flow control; nil when it has none.
func parseFlow(c protocol.FunctionConfig) (*Flow, error) {
	if c.Throttle == nil && c.RateLimit == nil && c.Debounce == nil {
		return nil, nil
	}
	f := &Flow{}
	var err error
	if f.Throttle, err = parseRate("config.throttle", c.Throttle, false); err != nil {
		return nil, err
	}
	if f.RateLimit, err = parseRate("config.rate_limit", c.RateLimit, true); err != nil {
		return nil, err
	}
	if d := c.Debounce; d != nil {
		if f.Throttle != nil {
			return nil, fmt.Errorf("config.debounce cannot be combined with config.throttle: a debounced run starts once its period has passed")
		}
		f.Debounce = &Debounce{MaxWait: DefaultDebounceWait}
		if f.Debounce.Period, err = parseFlowPeriod("config.debounce.period", d.Period); err != nil {
			return nil, err
		}
		if d.MaxWait != nil {
			if f.Debounce.MaxWait, err = parseFlowPeriod("config.debounce.max_wait", *d.MaxWait); err != nil {
				return nil, err
			}
		}
		if f.Debounce.MaxWait < f.Debounce.Period {
			return nil, fmt.Errorf("config.debounce.max_wait %s is shorter than config.debounce.period %s", f.Debounce.MaxWait, f.Debounce.Period)
		}
		if d.Key != nil {
			if f.Debounce.Key, err = ParseKey("config.debounce.key", *d.Key); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// ParseFlow reads the flow control of a stored config; nil when it has none.
func ParseFlow(raw json.RawMessage) (*Flow, error) {
	var c protocol.FunctionConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("config is not valid: %w", err)
	}
	return parseFlow(c)
}
