// Package memlimit gives a gateway process a soft memory limit and says when it is near,
// so that the gateway refuses new heavy work (exports, deploy checks, large list reads)
// before it runs out of memory instead of after.
//
// The limit is the Go runtime's soft memory limit (runtime/debug.SetMemoryLimit, what
// GOMEMLIMIT sets): past it the collector runs as often as it must to stay below. It is,
// in order: STEPGATE_MEMORY_LIMIT (a size such as 1536MiB or 2GiB, or a percentage of
// the memory available), GOMEMLIMIT when set, else DefaultShare of the memory available
// — the process's cgroup limit (memory.max, cgroup v2, or memory.limit_in_bytes, v1)
// when it has one, else the machine's RAM (MemTotal in /proc/meminfo).
//
// Near is true while the heap the last collection found live is over NearShare of the
// limit: the gateway keeps serving light requests and finishing what it started, and
// refuses new heavy work until collections bring it back.
package memlimit

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
)

// DefaultShare is the share of the available memory the limit is by default, 75%.
const DefaultShare = 0.75

// NearShare is the share of the limit past which the live heap is near it, 70%.
const NearShare = 0.70

// Limit is a process's soft memory limit: Bytes, and the setting it came from.
type Limit struct {
	Bytes  int64
	Source string // STEPGATE_MEMORY_LIMIT, GOMEMLIMIT, "75% of the cgroup's memory.max", …
}

// String is the limit for a message: "1.5 GiB (STEPGATE_MEMORY_LIMIT)".
func (l Limit) String() string {
	if l.Bytes <= 0 || l.Bytes == math.MaxInt64 {
		return "none"
	}
	return FormatBytes(l.Bytes) + " (" + l.Source + ")"
}

// Files are where the available memory is read; tests point them elsewhere.
type Files struct {
	CgroupV2, CgroupV1, Meminfo string
}

// SystemFiles are the files of a Linux process.
var SystemFiles = Files{
	CgroupV2: "/sys/fs/cgroup/memory.max",
	CgroupV1: "/sys/fs/cgroup/memory/memory.limit_in_bytes",
	Meminfo:  "/proc/meminfo",
}

// Choose returns the limit the environment (getenv) asks for, as the package doc says.
// A malformed STEPGATE_MEMORY_LIMIT is an error naming it; no limit found (no setting,
// and neither cgroup nor /proc/meminfo readable) is a zero Limit.
func Choose(getenv func(string) string, f Files) (Limit, error) {
	if v := strings.TrimSpace(getenv("STEPGATE_MEMORY_LIMIT")); v != "" {
		if share, ok := strings.CutSuffix(v, "%"); ok {
			p, err := strconv.ParseFloat(share, 64)
			if err != nil || p <= 0 || p > 100 {
				return Limit{}, fmt.Errorf("STEPGATE_MEMORY_LIMIT %q: a percentage must be above 0%% and at most 100%%", v)
			}
			avail, from := Available(f)
			if avail <= 0 {
				return Limit{}, fmt.Errorf("STEPGATE_MEMORY_LIMIT %q: the memory available is unknown here (no cgroup limit, no /proc/meminfo); give a size such as 2GiB", v)
			}
			return Limit{int64(float64(avail) * p / 100), "STEPGATE_MEMORY_LIMIT, " + v + " of " + from}, nil
		}
		n, err := ParseBytes(v)
		if err != nil {
			return Limit{}, fmt.Errorf("STEPGATE_MEMORY_LIMIT %q: %w", v, err)
		}
		return Limit{n, "STEPGATE_MEMORY_LIMIT"}, nil
	}
	if v := strings.TrimSpace(getenv("GOMEMLIMIT")); v != "" && v != "off" {
		n, err := ParseBytes(v)
		if err != nil {
			return Limit{}, fmt.Errorf("GOMEMLIMIT %q: %w", v, err)
		}
		return Limit{n, "GOMEMLIMIT"}, nil
	}
	avail, from := Available(f)
	if avail <= 0 {
		return Limit{}, nil
	}
	return Limit{int64(float64(avail) * DefaultShare), fmt.Sprintf("%.0f%% of %s", DefaultShare*100, from)}, nil
}

// Set makes l the runtime's soft memory limit; a zero Limit leaves the runtime's as it is.
func Set(l Limit) {
	if l.Bytes > 0 {
		debug.SetMemoryLimit(l.Bytes)
	}
}

// Available is the memory the process may use and where that was read: its cgroup's
// limit when it has one, else the machine's RAM; 0 when neither can be read.
func Available(f Files) (int64, string) {
	if b, err := os.ReadFile(f.CgroupV2); err == nil {
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err == nil && n > 0 {
			return n, "the cgroup's memory.max"
		}
	}
	if b, err := os.ReadFile(f.CgroupV1); err == nil {
		// An unlimited v1 group says a number near 2^63, rounded to a page.
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err == nil && n > 0 && n < 1<<62 {
			return n, "the cgroup's memory.limit_in_bytes"
		}
	}
	if fh, err := os.Open(f.Meminfo); err == nil {
		defer fh.Close()
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				fields := strings.Fields(rest) // "16333752 kB"
				if len(fields) == 2 && fields[1] == "kB" {
					if n, err := strconv.ParseInt(fields[0], 10, 64); err == nil && n > 0 {
						return n << 10, "the machine's memory"
					}
				}
			}
		}
	}
	return 0, ""
}

// ParseBytes parses a size as GOMEMLIMIT does: a number of bytes, optionally with a
// suffix B, KiB, MiB, GiB or TiB.
func ParseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	shift := uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("not a size such as 1536MiB or 2GiB (a positive number of bytes, with B, KiB, MiB, GiB or TiB)")
	}
	return n << shift, nil
}

// FormatBytes is n as a size a person reads: 1.5 GiB, 640 MiB, 12 KiB, 100 B.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		name  string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n >= 1<<u.shift {
			return strconv.FormatFloat(math.Round(float64(n)/float64(int64(1)<<u.shift)*10)/10, 'f', -1, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}

// Live is the heap the last garbage collection found live, in bytes.
func Live() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// Current is the runtime's soft memory limit now (math.MaxInt64: none).
func Current() int64 { return debug.SetMemoryLimit(-1) }

// Near says whether live bytes are past NearShare of a limit of limit bytes; a limit
// of 0 or less, or math.MaxInt64, is none and never near.
func Near(live, limit int64) bool {
	if limit <= 0 || limit == math.MaxInt64 {
		return false
	}
	return float64(live) > NearShare*float64(limit)
}
