package step

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// Option configures one call of this package: a step's retry policy and checkpoint
// ([MaxAttempts], [Backoff], [Lazy]), a wait's timeout ([Timeout]), which event a wait
// takes and how far back ([Matching], [SinceStart], [Since]), a child run's detachment
// ([Detached]). Each function says which
// options it takes; given one it does not take, it returns (or its future's Get
// returns) a non-retryable error that names the option and the function, without taking
// a seq.
type Option struct {
	name  string
	apply func(*options)
}

// options are the settings opts make.
type options struct {
	maxAttempts     int
	initial, maxInt time.Duration
	lazy            bool
	timeout         time.Duration
	match           Match
	detached        bool
	// shape are the options that set fields of a wait's await themselves, in order, such
	// as WaitForEvent's look-back (wait_event.go): an option of one wait kind lives in
	// that kind's file.
	shape []func(*protocol.Await)
}

// MaxAttempts sets how many attempts the step makes in all, the first included. Values
// below 1 count as 1. Defaults to [DefaultMaxAttempts]. For [Run] and [Go].
func MaxAttempts(n int) Option {
	return Option{"MaxAttempts", func(p *options) { p.maxAttempts = max(n, 1) }}
}

// Backoff sets the wait before each retry of the step: a random duration up to
// min(maxInterval, initial * 2^(n-1)) before attempt n+1, chosen by the gateway. Zero
// values leave the gateway's defaults (the function's retry policy). For [Run] and [Go].
func Backoff(initial, maxInterval time.Duration) Option {
	return Option{"Backoff", func(p *options) { p.initial, p.maxInt = initial, maxInterval }}
}

// Lazy trades a guarantee for latency, for this step (see functions.LazyCheckpoints for
// every step of a function): its result is journaled only when the function's next step
// starts or it answers, so if the invocation is lost in between (its process killed,
// say), the step runs again although code after it already saw its result. It saves
// one checkpoint round trip when the step is the last before an answer or a suspension.
// Without it (the default), [Run] returns only once the gateway has journaled the step.
// For [Run] only: a step started with [Go] is always checkpointed as soon as it
// finishes.
func Lazy() Option {
	return Option{"Lazy", func(p *options) { p.lazy = true }}
}

// Timeout bounds a wait: when d passes before what it waits for comes, its future's Get
// returns an error that is [ErrTimedOut]. For [WaitForEvent], [Receive],
// [ReceiveRequest] and [AwaitRun], d counts from when the gateway stores the wait (1s to 10 years;
// defaults to 24h). For [Callback], d is how long the callback stays open, from when it
// is made (1s to 8760h; defaults to 168h): a resolution after it is refused (409), and
// its result's wait times out then. A d of zero or less keeps the default. Given to
// [WaitFirst], a wait's Timeout is one of its deadlines, as a timer is: when it passes
// first, WaitFirst returns that wait's index and its Get returns the timed-out error.
func Timeout(d time.Duration) Option {
	return Option{"Timeout", func(p *options) { p.timeout = d }}
}

// Matching says which event [WaitForEvent] takes: one whose fields hold m's values (see
// [Match]). Without it, the wait takes any event of the name.
func Matching(m Match) Option {
	return Option{"Matching", func(p *options) { p.match = m }}
}

// Detached starts the child run of [Invoke] detached: cancelling this run does not
// cancel it, and it does not inherit this run's deadline.
func Detached() Option {
	return Option{"Detached", func(p *options) { p.detached = true }}
}

// optionsFor returns the settings opts make for fn, which takes the options named
// takes; an option it does not take is a non-retryable error naming both.
func optionsFor(fn string, opts []Option, takes ...string) (options, error) {
	p := options{maxAttempts: DefaultMaxAttempts}
	for _, o := range opts {
		if o.apply == nil {
			continue
		}
		if !slices.Contains(takes, o.name) {
			what := "no option"
			if len(takes) > 0 {
				what = strings.Join(takes, ", ")
			}
			return p, NonRetryable(fmt.Errorf("step: option %s does not apply to %s (it takes %s)", o.name, fn, what))
		}
		o.apply(&p)
	}
	return p, nil
}

func (p *options) api() *protocol.RetryPolicy {
	r := &protocol.RetryPolicy{MaxAttempts: new(p.maxAttempts)}
	if p.initial > 0 {
		r.InitialInterval = new(p.initial.String())
	}
	if p.maxInt > 0 {
		r.MaxInterval = new(p.maxInt.String())
	}
	return r
}

// failure decides what err, returned by attempt of the step at seq, makes of it: the
// retry the run waits for when it has attempts left and err is retryable, or else the
// final error its entry journals.
func (p options) failure(seq int, name string, attempt int, err error) (retry *protocol.Await, final *protocol.ErrorInfo) {
	typ := ErrorTypeFailed
	last := attempt >= p.maxAttempts
	if IsNonRetryable(err) {
		typ, last = ErrorTypeNonRetryable, true
	}
	if !last {
		return &protocol.Await{
			Type: protocol.AwaitTypeRetry, Seq: seq, Name: name, Attempt: &attempt,
			Error: &protocol.ErrorInfo{Type: typ, Message: err.Error(), Retryable: new(true)},
			Retry: p.api(),
		}, nil
	}
	return nil, &protocol.ErrorInfo{Type: typ, Message: err.Error(), Retryable: new(false)}
}
