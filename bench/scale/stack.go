package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/protocol"
)

// stack is the gateway measured: its API client, its database (to count runs), and the
// processes whose CPU and memory are measured.
type stack struct {
	bin           string
	client        *protocol.ClientWithResponses
	http          *http.Client
	db            *pgxpool.Pool
	gatewayPID    int
	postmasterPID int
	pprofURL      string
	stop          func()
}

// startStack starts `stepgate dev` on a fresh private Postgres in a temporary directory,
// or attaches to the gateway at cfg.URL.
func startStack(ctx context.Context, cfg config, logf func(string, ...any)) (st *stack, err error) {
	st = &stack{gatewayPID: cfg.GatewayPID, postmasterPID: cfg.PostmasterPID}
	var stops []func()
	st.stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			st.stop()
		}
	}()
	base, token, dbURL := cfg.URL, cfg.Token, cfg.DatabaseURL
	if base == "" {
		work, err := os.MkdirTemp("", "stepgate-scale-")
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() { os.RemoveAll(work) })
		// The private Postgres runs as the postgres OS user when we are root.
		if err := os.Chmod(work, 0o755); err != nil {
			return nil, err
		}
		st.bin = cfg.Bin
		if st.bin == "" {
			st.bin = filepath.Join(work, "stepgate")
			logf("building cmd/stepgate")
			out, err := exec.CommandContext(ctx, "go", "build", "-o", st.bin, "github.com/stepgate/stepgate/cmd/stepgate").CombinedOutput()
			if err != nil {
				return nil, fmt.Errorf("build cmd/stepgate: %v: %s", err, out)
			}
		}
		var stopDev func()
		base, token, dbURL, stopDev, err = startDev(st, work, logf)
		if err != nil {
			return nil, err
		}
		stops = append(stops, stopDev)
	}
	if token == "" || dbURL == "" {
		return nil, errors.New("-url needs -token and -database-url")
	}
	st.http = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}
	stops = append(stops, st.http.CloseIdleConnections)
	st.client, err = protocol.NewClientWithResponses(base, protocol.WithHTTPClient(st.http),
		protocol.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = 2
	if st.db, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", dbURL, err)
	}
	stops = append(stops, st.db.Close)
	return st, nil
}

// startDev starts `stepgate dev` of st.bin in work and returns its API's URL, its dev
// token, its database's URL and how to stop it; it sets st's process ids and pprof URL.
func startDev(st *stack, work string, logf func(string, ...any)) (base, token, dbURL string, stop func(), err error) {
	addr, err := freeAddr()
	if err != nil {
		return "", "", "", nil, err
	}
	pprofAddr, err := freeAddr()
	if err != nil {
		return "", "", "", nil, err
	}
	state := filepath.Join(work, "state")
	dev := exec.Command(st.bin, "dev", "--addr", addr, "--dir", state)
	dev.Env = append(os.Environ(), "DATABASE_URL=", "STEPGATE_PPROF_ADDR="+pprofAddr, "STEPGATE_LOG_LEVEL=warn")
	dev.Stderr = os.Stderr
	stdout, err := dev.StdoutPipe()
	if err != nil {
		return "", "", "", nil, err
	}
	logf("starting stepgate dev on %s (state in %s)", addr, state)
	if err := dev.Start(); err != nil {
		return "", "", "", nil, err
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = dev.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = dev.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = dev.Process.Kill()
				<-done
			}
		})
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deadline := time.After(3 * time.Minute)
	for token == "" || dbURL == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				stop()
				return "", "", "", nil, errors.New("stepgate dev ended before printing its token")
			}
			if t, ok := strings.CutPrefix(line, "STEPGATE_TOKEN="); ok {
				token = t
			}
			if f := strings.Fields(line); len(f) == 2 && f[0] == "database" {
				dbURL = f[1]
			}
		case <-deadline:
			stop()
			return "", "", "", nil, errors.New("stepgate dev printed no token in 3 minutes")
		}
	}
	go func() { // drain
		for range lines {
		}
	}()
	pid, err := os.ReadFile(filepath.Join(state, "pg", "data", "postmaster.pid"))
	if err != nil {
		stop()
		return "", "", "", nil, fmt.Errorf("find the postmaster: %w", err)
	}
	first, _, _ := strings.Cut(string(pid), "\n")
	if st.postmasterPID, err = strconv.Atoi(strings.TrimSpace(first)); err != nil {
		stop()
		return "", "", "", nil, fmt.Errorf("postmaster.pid: %w", err)
	}
	st.gatewayPID = dev.Process.Pid
	st.pprofURL = "http://" + pprofAddr
	return "http://" + addr, token, dbURL, stop, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// clockTicks is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTicks = 100

// cpu is CPU time consumed so far. postgres is the sum of pgBackends (the processes of
// connections), pgVacuums (autovacuum workers, live, and every child that has exited:
// mostly autovacuum workers) and the rest (the postmaster and its background processes).
type cpu struct {
	gateway, postgres     time.Duration
	pgBackends, pgVacuums time.Duration
}

func (a cpu) sub(b cpu) cpu {
	return cpu{a.gateway - b.gateway, a.postgres - b.postgres, a.pgBackends - b.pgBackends, a.pgVacuums - b.pgVacuums}
}

// cpuNow reads the CPU time consumed so far by the gateway process, and by Postgres: its
// postmaster, the children the postmaster has reaped, and its live children. Zero for a
// process not known.
func (st *stack) cpuNow() cpu {
	var c cpu
	if st.gatewayPID != 0 {
		if s, err := readStat(st.gatewayPID); err == nil {
			c.gateway = ticks(s.utime + s.stime)
		}
	}
	if st.postmasterPID != 0 {
		if s, err := readStat(st.postmasterPID); err == nil {
			c.postgres = ticks(s.utime + s.stime + s.cutime + s.cstime)
			c.pgVacuums = ticks(s.cutime + s.cstime)
		}
		for _, pid := range children(st.postmasterPID) {
			s, err := readStat(pid)
			if err != nil || s.ppid != st.postmasterPID {
				continue
			}
			t := ticks(s.utime + s.stime)
			c.postgres += t
			title, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			switch {
			case strings.Contains(string(title), "autovacuum worker"):
				c.pgVacuums += t
			case strings.Contains(string(title), "[local]") || strings.Contains(string(title), "127.0.0.1"):
				c.pgBackends += t
			}
		}
	}
	return c
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }

type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime int64
}

// readStat reads /proc/pid/stat's parent and times.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3, the state
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var s procStat
	s.ppid, _ = strconv.Atoi(f[1])
	s.utime, _ = strconv.ParseInt(f[11], 10, 64)
	s.stime, _ = strconv.ParseInt(f[12], 10, 64)
	s.cutime, _ = strconv.ParseInt(f[13], 10, 64)
	s.cstime, _ = strconv.ParseInt(f[14], 10, 64)
	return s, nil
}

// children returns the ids of the live processes whose parent is pid.
func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// statusKB returns a field of /proc/pid/status in KiB (VmRSS, VmHWM), or 0.
func statusKB(pid int, field string) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// resetPeak resets the gateway's peak RSS (VmHWM) to its current RSS, and reports
// whether it could.
func (st *stack) resetPeak() bool {
	return st.gatewayPID != 0 && os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", st.gatewayPID), []byte("5"), 0) == nil
}

// postgresPSSKB returns the proportional set size of the postmaster and its children
// in KiB: their memory, shared buffers counted once.
func (st *stack) postgresPSSKB() int64 {
	if st.postmasterPID == 0 {
		return 0
	}
	var total int64
	for _, pid := range append(children(st.postmasterPID), st.postmasterPID) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += n
			}
		}
	}
	return total
}

// heapKB returns the gateway's heap in use after a forced GC (HeapAlloc), in KiB, or 0
// when its pprof is not served.
func (st *stack) heapKB(ctx context.Context) int64 {
	if st.pprofURL == "" {
		return 0
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.pprofURL+"/debug/pprof/heap?gc=1&debug=1", nil)
	if err != nil {
		return 0
	}
	resp, err := st.http.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			_, _ = io.Copy(io.Discard, resp.Body)
			n, _ := strconv.ParseInt(v, 10, 64)
			return n / 1024
		}
	}
	return 0
}
