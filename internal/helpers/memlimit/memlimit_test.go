package memlimit_test

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/helpers/memlimit"
)

// files writes the given cgroup and meminfo contents ("" leaves a file out).
func files(t *testing.T, v2, v1, meminfo string) memlimit.Files {
	dir := t.TempDir()
	f := memlimit.Files{
		CgroupV2: filepath.Join(dir, "memory.max"),
		CgroupV1: filepath.Join(dir, "memory.limit_in_bytes"),
		Meminfo:  filepath.Join(dir, "meminfo"),
	}
	for path, text := range map[string]string{f.CgroupV2: v2, f.CgroupV1: v1, f.Meminfo: meminfo} {
		if text != "" {
			require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
		}
	}
	return f
}

func env(kv ...string) func(string) string {
	return func(k string) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1]
			}
		}
		return ""
	}
}

func TestChoose(t *testing.T) {
	meminfo := "MemTotal:       16777216 kB\nMemFree:         1000 kB\n"
	for _, c := range []struct {
		name          string
		getenv        func(string) string
		v2, v1, mem   string
		bytes         int64
		source, error string
	}{
		{name: "the cgroup v2 limit, 75% of it", getenv: env(), v2: "4294967296\n", mem: meminfo, bytes: 3 << 30, source: "75% of the cgroup's memory.max"},
		{name: "an unlimited v2 group: the v1 limit", getenv: env(), v2: "max\n", v1: "2147483648\n", mem: meminfo, bytes: 3 << 29, source: "75% of the cgroup's memory.limit_in_bytes"},
		{name: "an unlimited v1 group: the machine's memory", getenv: env(), v1: "9223372036854771712\n", mem: meminfo, bytes: 12 << 30, source: "75% of the machine's memory"},
		{name: "nothing readable: none", getenv: env(), bytes: 0},
		{name: "a size", getenv: env("STEPGATE_MEMORY_LIMIT", "1536MiB", "GOMEMLIMIT", "1GiB"), mem: meminfo, bytes: 1536 << 20, source: "STEPGATE_MEMORY_LIMIT"},
		{name: "a percentage", getenv: env("STEPGATE_MEMORY_LIMIT", "50%"), mem: meminfo, bytes: 8 << 30, source: "STEPGATE_MEMORY_LIMIT, 50% of the machine's memory"},
		{name: "GOMEMLIMIT", getenv: env("GOMEMLIMIT", "3GiB"), mem: meminfo, bytes: 3 << 30, source: "GOMEMLIMIT"},
		{name: "a malformed size", getenv: env("STEPGATE_MEMORY_LIMIT", "2GB"), error: `STEPGATE_MEMORY_LIMIT "2GB": not a size`},
		{name: "a percentage over 100", getenv: env("STEPGATE_MEMORY_LIMIT", "120%"), mem: meminfo, error: "at most 100%"},
		{name: "a percentage of nothing known", getenv: env("STEPGATE_MEMORY_LIMIT", "50%"), error: "the memory available is unknown here"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := memlimit.Choose(c.getenv, files(t, c.v2, c.v1, c.mem))
			if c.error != "" {
				require.ErrorContains(t, err, c.error)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.bytes, l.Bytes)
			require.Equal(t, c.source, l.Source)
		})
	}
}

func TestParseAndFormat(t *testing.T) {
	for in, want := range map[string]int64{"100": 100, "100B": 100, "12KiB": 12 << 10, "640MiB": 640 << 20, "2GiB": 2 << 30, "1TiB": 1 << 40} {
		n, err := memlimit.ParseBytes(in)
		require.NoError(t, err, in)
		require.Equal(t, want, n, in)
	}
	for _, bad := range []string{"", "0", "-1", "1.5GiB", "2GB", "9999999TiB", "GiB"} {
		_, err := memlimit.ParseBytes(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, "1.5 GiB", memlimit.FormatBytes(3<<29))
	require.Equal(t, "640 MiB", memlimit.FormatBytes(640<<20))
	require.Equal(t, "100 B", memlimit.FormatBytes(100))
	require.Equal(t, "1.5 GiB (STEPGATE_MEMORY_LIMIT)", memlimit.Limit{Bytes: 3 << 29, Source: "STEPGATE_MEMORY_LIMIT"}.String())
	require.Equal(t, "none", memlimit.Limit{}.String())
}

func TestNear(t *testing.T) {
	require.False(t, memlimit.Near(100, 0), "no limit")
	require.False(t, memlimit.Near(100, math.MaxInt64), "no limit")
	require.False(t, memlimit.Near(70, 100))
	require.True(t, memlimit.Near(71, 100))
	runtime.GC()
	require.Greater(t, memlimit.Live(), int64(0), "the runtime reports a live heap")
}
