package readpool

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestSplitHosts: a URL of several hosts is one config per host, each with its own TLS
// fallbacks only.
func TestSplitHosts(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://u@r1:5433,r2:5434,r3/db?sslmode=prefer")
	require.NoError(t, err)
	var got []string
	for _, c := range SplitHosts(cfg) {
		got = append(got, c.ConnConfig.Host)
		require.Len(t, c.ConnConfig.Fallbacks, 1, "the host's plain-text fallback of sslmode=prefer")
		require.Equal(t, c.ConnConfig.Host, c.ConnConfig.Fallbacks[0].Host)
		require.Equal(t, c.ConnConfig.Port, c.ConnConfig.Fallbacks[0].Port)
	}
	require.Equal(t, []string{"r1", "r2", "r3"}, got)

	one, err := pgxpool.ParseConfig("postgres://u@r1/db?sslmode=disable")
	require.NoError(t, err)
	split := SplitHosts(one)
	require.Len(t, split, 1)
	require.Equal(t, "r1", split[0].ConnConfig.Host)
	require.Empty(t, split[0].ConnConfig.Fallbacks)
}

func TestParseLSN(t *testing.T) {
	t.Parallel()
	n, err := parseLSN("16/B374D848")
	require.NoError(t, err)
	require.Equal(t, uint64(0x16)<<32|0xB374D848, n)
	a, _ := parseLSN("0/FFFFFFFF")
	b, _ := parseLSN("1/0")
	require.Less(t, a, b)
	for _, bad := range []string{"", "16", "x/1", "1/", "1/100000000"} {
		_, err := parseLSN(bad)
		require.Error(t, err, bad)
	}
}

// TestCaughtUpAsOfAnEarlierCheck: a replica that has not reached the last check's
// primary position but has reached an earlier one's is caught up as of that earlier
// check's start; one that reached none is not renewed; and it never goes back.
func TestCaughtUpAsOfAnEarlierCheck(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	r := &Reads{maxLag: time.Second, samples: []sample{
		{t0, 100}, {t0.Add(250 * time.Millisecond), 200}, {t0.Add(500 * time.Millisecond), 300},
	}}
	rp := &replica{}
	r.caughtUp(rp, 50)
	require.Zero(t, rp.caughtUp.Load(), "behind every check")
	r.caughtUp(rp, 250)
	require.Equal(t, t0.Add(250*time.Millisecond).UnixNano(), rp.caughtUp.Load(), "as of the second check")
	r.caughtUp(rp, 300)
	require.Equal(t, t0.Add(500*time.Millisecond).UnixNano(), rp.caughtUp.Load(), "as of the last check")
	r.caughtUp(rp, 150)
	require.Equal(t, t0.Add(500*time.Millisecond).UnixNano(), rp.caughtUp.Load(), "never back")
}
