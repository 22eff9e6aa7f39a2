package invoker_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/invoker"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	p := invoker.RetryPolicy{MaxAttempts: 10, InitialInterval: 100 * ms, MaxInterval: time.Second}
	for _, tc := range []struct {
		name     string
		p        invoker.RetryPolicy
		attempt  int
		min, max time.Duration
	}{
		{"First", p, 1, 50 * ms, 100 * ms},
		{"Second", p, 2, 100 * ms, 200 * ms},
		{"Third", p, 3, 200 * ms, 400 * ms},
		{"Fourth", p, 4, 400 * ms, 800 * ms},
		{"Capped", p, 5, 500 * ms, time.Second},
		{"StaysCapped", p, 60, 500 * ms, time.Second},
		{"ZeroAttemptIsTheFirst", p, 0, 50 * ms, 100 * ms},
		{"NoInterval", invoker.RetryPolicy{}, 3, 0, 0},
		{"OneNanosecond", invoker.RetryPolicy{InitialInterval: 1, MaxInterval: 1}, 1, 0, 1},
		{"InitialAboveMax", invoker.RetryPolicy{InitialInterval: 2 * time.Second, MaxInterval: time.Second}, 1, 500 * ms, time.Second},
		{"HugeCapDoesNotOverflow", invoker.RetryPolicy{InitialInterval: time.Second, MaxInterval: math.MaxInt64}, 100,
			math.MaxInt64 / 2, math.MaxInt64},
		{"HugeCapGrows", invoker.RetryPolicy{InitialInterval: time.Second, MaxInterval: math.MaxInt64}, 31,
			1 << 29 * time.Second, 1 << 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seen := map[time.Duration]bool{}
			for range 200 {
				d := tc.p.Backoff(tc.attempt)
				require.GreaterOrEqual(t, d, tc.min)
				require.LessOrEqual(t, d, tc.max)
				seen[d] = true
			}
			if tc.max-tc.min > time.Millisecond {
				require.Greater(t, len(seen), 1, "jittered")
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	defaults := invoker.FunctionConfig{Timeout: 5 * time.Minute, Retries: invoker.RetryPolicy{
		MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: time.Minute,
	}}
	for _, tc := range []struct {
		name, config string
		want         invoker.FunctionConfig
	}{
		{"Absent", ``, defaults},
		{"Empty", `{}`, defaults},
		{"EmptyRetries", `{"retries":{}}`, defaults},
		{"UnknownFieldsAreIgnored", `{"some_future_field":3}`, defaults},
		{"All", `{"timeout":"30s","retries":{"max_attempts":5,"initial_interval":"10ms","max_interval":"20ms"}}`,
			invoker.FunctionConfig{Timeout: 30 * time.Second, Retries: invoker.RetryPolicy{MaxAttempts: 5, InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond}}},
		{"SomeRetries", `{"retries":{"max_attempts":1}}`,
			invoker.FunctionConfig{Timeout: 5 * time.Minute, Retries: invoker.RetryPolicy{MaxAttempts: 1, InitialInterval: time.Second, MaxInterval: time.Minute}}},
		{"MaxRaisedToInitial", `{"retries":{"initial_interval":"2m"}}`,
			invoker.FunctionConfig{Timeout: 5 * time.Minute, Retries: invoker.RetryPolicy{MaxAttempts: 3, InitialInterval: 2 * time.Minute, MaxInterval: 2 * time.Minute}}},
		{"ZeroIntervals", `{"retries":{"initial_interval":"0s","max_interval":"0s"}}`,
			invoker.FunctionConfig{Timeout: 5 * time.Minute, Retries: invoker.RetryPolicy{MaxAttempts: 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := invoker.ParseConfig(json.RawMessage(tc.config))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	for _, tc := range []struct {
		name, config, want string
	}{
		{"NotJSON", `timeout: 30s`, "config is not valid: "},
		{"WrongType", `{"timeout":30}`, "config is not valid: "},
		{"BadTimeout", `{"timeout":"soon"}`, `config.timeout "soon" is not a positive duration such as 30s`},
		{"ZeroTimeout", `{"timeout":"0s"}`, `config.timeout "0s" is not a positive duration such as 30s`},
		{"NegativeTimeout", `{"timeout":"-1s"}`, `config.timeout "-1s" is not a positive duration such as 30s`},
		{"NoAttempts", `{"retries":{"max_attempts":0}}`, "config.retries: max_attempts must be at least 1, not 0"},
		{"BadInitial", `{"retries":{"initial_interval":"1 second"}}`, `config.retries: initial_interval "1 second" is not a duration such as 1s`},
		{"NegativeMax", `{"retries":{"max_interval":"-1m"}}`, `config.retries: max_interval "-1m" is not a duration such as 1s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := invoker.ParseConfig(json.RawMessage(tc.config))
			require.ErrorContains(t, err, tc.want)
		})
	}
}
