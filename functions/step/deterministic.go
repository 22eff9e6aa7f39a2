package step

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"time"
)

// The code of a function between its steps runs again on every replay, so it must take
// the same path each time. A clock, a random number or a fresh UUID read there changes
// from one invocation to the next: Now, UUID and Random journal the value once, as a
// step named name, and return the journaled value on every replay.

// Now returns the current time, journaled as the step called name: a replay returns the
// time the step first read, so code that branches on it (a deadline, a timestamp stored
// with the run's output) takes the same path. time.Now still works inside a step's
// function, or for logs; between steps it changes on replay. The time is in UTC, with
// the precision encoding/json keeps (nanoseconds). Errors are [Run]'s.
func Now(ctx context.Context, name string) (time.Time, error) {
	return Run(ctx, name, func(context.Context) (time.Time, error) {
		return time.Now().UTC().Round(0), nil
	})
}

// UUID returns a random (version 4) UUID in its canonical text form, journaled as the
// step called name: a replay returns the same UUID, so an id handed to another system
// (an idempotency key, a row's key) stays the same. Errors are [Run]'s.
func UUID(ctx context.Context, name string) (string, error) {
	return Run(ctx, name, func(context.Context) (string, error) {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		b[6] = b[6]&0x0f | 0x40 // version 4
		b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
		return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
	})
}

// Random returns a pseudo-random number in [0.0, 1.0), journaled as the step called
// name: a replay returns the same number, so a random choice (a sample, a jitter, an A/B
// branch) is made once per run. It is not for secrets. Errors are [Run]'s.
func Random(ctx context.Context, name string) (float64, error) {
	return Run(ctx, name, func(context.Context) (float64, error) {
		return mrand.Float64(), nil
	})
}
