package clock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/invoker/internal/clock"
)

func TestTest(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := clock.NewTest(t0)
	require.Equal(t, t0, c.Now())
	require.Equal(t, t0, c.Now(), "still, until moved")
	c.Advance(time.Hour)
	require.Equal(t, t0.Add(time.Hour), c.Now())
	c.Step(time.Minute)
	require.Equal(t, t0.Add(time.Hour), c.Now(), "read, then moved on")
	require.Equal(t, t0.Add(time.Hour+time.Minute), c.Now())
}
