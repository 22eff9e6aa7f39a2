package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/internal/wiring/pgserver"
)

// Automatic failover under Patroni (issue 44, item 1): three Postgres nodes managed by
// Patroni (Debian's patroni, with one etcd member as its DCS; synchronous_mode: true),
// and two gateways that reach the leader through a multi-host URL of the three with
// target_session_attrs=read-write (docs/operations.md, "Deploying with Patroni"). Under
// the failover scenario's load (failoverUnderLoad), a fault of the leader; Patroni
// decides what follows, and the checks are those of testFailover.

// testPatroniKillPostgres kills the leader's Postgres (SIGKILL of the postmaster): its
// Patroni, which still holds the leader key, finds it down and starts it again (crash
// recovery), or a replica takes over.
func testPatroniKillPostgres(t *testing.T) {
	testPatroni(t, "SIGKILL of the leader's postmaster", func(c *patroniCluster, leader *patroniNode) error {
		return leader.killPostgres()
	})
}

// testPatroniKillPatroni kills the leader's Patroni (SIGKILL) and its Postgres with it,
// as the watchdog Patroni documents (a node whose Patroni dies must not keep a primary
// running that nobody manages) or the loss of the node would: the leader key expires
// (ttl) and Patroni on the synchronous standby promotes it. The killed node's Patroni is
// started again afterwards, as its service manager would, and rejoins as a replica.
func testPatroniKillPatroni(t *testing.T) {
	testPatroni(t, "SIGKILL of the leader's Patroni (and its Postgres)", func(c *patroniCluster, leader *patroniNode) error {
		if err := leader.killPatroni(); err != nil {
			return err
		}
		return leader.killPostgres()
	})
}

// testPatroniSwitchover asks Patroni for a switchover (POST /switchover of its REST API,
// as patronictl switchover --force does): the leader stops cleanly and its synchronous
// standby is promoted.
func testPatroniSwitchover(t *testing.T) {
	testPatroni(t, "switchover (Patroni's REST API)", func(c *patroniCluster, leader *patroniNode) error {
		return c.switchover(leader)
	})
}

// patroniTurn runs the Patroni scenarios one at a time: each runs three Postgres servers,
// three Patronis and etcd beside its gateways.
var patroniTurn sync.Mutex

func testPatroni(t *testing.T, what string, fault func(c *patroniCluster, leader *patroniNode) error) {
	patroniTurn.Lock()
	defer patroniTurn.Unlock()
	c := startPatroniCluster(t, 3)
	url := c.url("chaos")
	failoverUnderLoad(t, url, fnPatient, func(s *scenario) failover {
		leader, err := c.leader(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		fo := failover{what: what, since: "a leader again (Patroni's REST API)", timeoutsOK: true, lost: time.Now()}
		if err := fault(c, leader); err != nil {
			t.Fatal(err)
		}
		// The leader again: a member that Patroni's REST API calls the leader, running, and
		// that takes writes.
		var next *patroniNode
		if err := waitFor(s.ctx, 2*time.Minute, "a leader again that takes writes", func() (bool, error) {
			n, err := c.leader(s.ctx)
			if err != nil {
				return false, err
			}
			if err := n.takesWrites(s.ctx); err != nil {
				return false, err
			}
			next = n
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		fo.promoting, fo.promoted = time.Now(), time.Now()
		fo.detail = fmt.Sprintf("%s was the leader; %s is, %s later", leader.name, next.name, fo.promoted.Sub(fo.lost).Round(10*time.Millisecond))
		if !leader.patroniUp() {
			if err := leader.startPatroni(); err != nil {
				t.Error(err)
			}
		}
		return fo
	})
	// The killed or demoted node rejoins: the cluster has its three members running again.
	if err := waitFor(t.Context(), 2*time.Minute, "three members running again", func() (bool, error) {
		ms, err := c.members(t.Context())
		running := 0
		for _, m := range ms {
			if m.State == "running" || m.State == "streaming" {
				running++
			}
		}
		return running == len(c.nodes), err
	}); err != nil {
		t.Error(err)
	}
}

// --- the cluster ------------------------------------------------------------------------

// patroniTTL is the leader key's time to live, in seconds: how long a leader whose
// Patroni died keeps its key. Patroni's default is 30; Patroni wants loop_wait +
// 2*retry_timeout <= ttl.
const patroniTTL = 20

type patroniCluster struct {
	t        *testing.T
	dir      string
	cred     *syscall.Credential
	etcd     string // host:port of its client URL
	etcdProc *proc
	nodes    []*patroniNode
	http     *http.Client
}

type patroniNode struct {
	c        *patroniCluster
	name     string
	dir      string
	pgPort   int
	restPort int
	cfg      string
	proc     *proc
}

// proc is a process the test started, and when it exited.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *proc) up() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// startPatroniCluster starts one etcd member and n Patroni nodes (Postgres 15, the
// machine's), as the postgres OS user when the test runs as root, all on 127.0.0.1,
// waits until one leads and the others stream from it (one of them as its synchronous
// standby), and creates the database chaos. It skips the test when patroni or etcd is
// not installed. Everything is stopped when the test ends.
func startPatroniCluster(t *testing.T, n int) *patroniCluster {
	t.Helper()
	bins := map[string]string{}
	for _, b := range []string{"patroni", "etcd"} {
		p, err := exec.LookPath(b)
		if err != nil {
			t.Skip("chaos: " + b + " is not installed (apt-get install -y patroni etcd-server); this scenario runs Postgres under Patroni")
		}
		bins[b] = p
	}
	binDir := pgserver.DefaultSearch(os.Getenv).BinDir("")
	if binDir == "" {
		t.Skip("chaos: no Postgres server binaries")
	}
	dir, err := os.MkdirTemp("", "sg-patroni-")
	if err != nil {
		t.Fatal(err)
	}
	c := &patroniCluster{t: t, dir: dir, http: &http.Client{Timeout: 5 * time.Second}}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skip("chaos: running as root needs the postgres OS user to run Patroni as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.stop)

	// etcd: one member, its data in a directory of the cluster's.
	etcdDir := c.mkdir("etcd")
	cport, pport := freePort(t), freePort(t)
	c.etcd = "127.0.0.1:" + strconv.Itoa(cport)
	etcdProc, err := c.start(bins["etcd"], filepath.Join(etcdDir, "etcd.log"),
		"--name", "etcd1", "--data-dir", filepath.Join(etcdDir, "data"),
		"--listen-client-urls", "http://"+c.etcd, "--advertise-client-urls", "http://"+c.etcd,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(pport),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(pport),
		"--initial-cluster", "etcd1=http://127.0.0.1:"+strconv.Itoa(pport),
		"--initial-cluster-state", "new")
	if err != nil {
		t.Fatal(err)
	}
	c.etcdProc = etcdProc
	if err := waitFor(t.Context(), 30*time.Second, "etcd healthy", func() (bool, error) {
		resp, err := c.http.Get("http://" + c.etcd + "/health")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, tailFile(filepath.Join(etcdDir, "etcd.log"), 20))
	}

	for i := range n {
		nd := &patroniNode{c: c, name: fmt.Sprintf("pg%d", i+1), pgPort: freePort(t), restPort: freePort(t)}
		nd.dir = c.mkdir(nd.name)
		nd.cfg = filepath.Join(nd.dir, "patroni.yml")
		if err := os.WriteFile(nd.cfg, []byte(nd.config(binDir)), 0o644); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, nd)
	}
	// The first bootstraps the cluster (initdb); the others then clone it.
	for i, nd := range c.nodes {
		if err := nd.startPatroni(); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := waitFor(t.Context(), 2*time.Minute, nd.name+" leads", func() (bool, error) {
				l, err := c.leader(t.Context())
				return err == nil && l == nd, err
			}); err != nil {
				t.Fatalf("%v\n%s", err, tailFile(filepath.Join(nd.dir, "patroni.log"), 30))
			}
		}
	}
	if err := waitFor(t.Context(), 3*time.Minute, "a leader, a synchronous standby and a replica, streaming", func() (bool, error) {
		ms, err := c.members(t.Context())
		roles := map[string]int{}
		for _, m := range ms {
			if m.State == "running" || m.State == "streaming" {
				roles[m.Role]++
			}
		}
		return roles["leader"] == 1 && roles["sync_standby"] == 1 && roles["replica"] == n-2, err
	}); err != nil {
		t.Fatal(err)
	}
	leader, err := c.leader(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), leader.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	if _, err := conn.Exec(t.Context(), `CREATE DATABASE chaos`); err != nil {
		t.Fatal(err)
	}
	return c
}

// url returns the superuser URL of database dbname that names every node, with
// target_session_attrs=read-write: a connection is made to the first that takes writes.
func (c *patroniCluster) url(dbname string) string {
	hosts := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(nd.pgPort)
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + dbname + "?sslmode=disable&target_session_attrs=read-write"
}

func (c *patroniCluster) mkdir(name string) string {
	d := filepath.Join(c.dir, name)
	if err := os.Mkdir(d, 0o700); err != nil {
		c.t.Fatal(err)
	}
	if c.cred != nil {
		if err := os.Chown(d, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			c.t.Fatal(err)
		}
	}
	return d
}

// start starts bin with args as the cluster's OS user, its output to logPath.
func (c *patroniCluster) start(bin, logPath string, args ...string) (*proc, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Dir(logPath)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + filepath.Dir(logPath), "LANG=C.UTF-8"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.cred != nil {
		cmd.SysProcAttr.Credential = c.cred
	}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); out.Close(); close(p.exited) }()
	return p, nil
}

// stopProc signals p and waits up to 30s for it to exit, then kills it.
func stopProc(p *proc, sig syscall.Signal) {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// stop stops every node's Patroni (which stops its Postgres), then any Postgres left
// running (a node whose Patroni was killed).
func (c *patroniCluster) stop() {
	for _, nd := range c.nodes {
		stopProc(nd.proc, syscall.SIGTERM)
	}
	for _, nd := range c.nodes {
		if pid := nd.postmasterPID(); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil {
				time.Sleep(50 * time.Millisecond) // a process not ours to wait for
			}
		}
	}
	stopProc(c.etcdProc, syscall.SIGTERM)
	if c.t.Failed() {
		c.t.Logf("patroni, etcd and postgres files kept in %s", c.dir)
		for _, nd := range c.nodes {
			c.t.Logf("end of %s's patroni.log:\n%s", nd.name, tailFile(filepath.Join(nd.dir, "patroni.log"), 30))
		}
		return
	}
	os.RemoveAll(c.dir)
}

// member is a member of the cluster as Patroni's GET /cluster lists it.
type member struct {
	Name  string `json:"name"`
	Role  string `json:"role"`  // leader, sync_standby, replica
	State string `json:"state"` // running, streaming, stopped, starting, ...
}

// members returns the cluster's members from the REST API of the first node that
// answers.
func (c *patroniCluster) members(ctx context.Context) ([]member, error) {
	var last error
	for _, nd := range c.nodes {
		var out struct {
			Members []member `json:"members"`
		}
		if err := nd.rest(ctx, http.MethodGet, "/cluster", nil, &out); err != nil {
			last = err
			continue
		}
		return out.Members, nil
	}
	return nil, last
}

// leader returns the node the cluster calls its running leader.
func (c *patroniCluster) leader(ctx context.Context) (*patroniNode, error) {
	ms, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Role == "leader" && m.State == "running" {
			for _, nd := range c.nodes {
				if nd.name == m.Name {
					return nd, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no running leader among %v", ms)
}

// switchover asks the leader for a switchover to any healthy candidate (the
// synchronous standby, in synchronous_mode), as patronictl switchover --force does.
func (c *patroniCluster) switchover(leader *patroniNode) error {
	// Patroni answers once the switchover is done (or failed).
	ctx, cancel := context.WithTimeout(c.t.Context(), 2*time.Minute)
	defer cancel()
	return leader.rest(ctx, http.MethodPost, "/switchover", map[string]any{"leader": leader.name}, nil)
}

// config is the node's patroni.yml.
func (nd *patroniNode) config(binDir string) string {
	return fmt.Sprintf(`scope: sgchaos
namespace: /service/
name: %[1]s
log:
  level: INFO
restapi:
  listen: 127.0.0.1:%[2]d
  connect_address: 127.0.0.1:%[2]d
etcd3:
  hosts: %[3]s
bootstrap:
  dcs:
    ttl: %[7]d
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        max_connections: 200
  initdb:
    - encoding: UTF8
    - locale: C
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:%[4]d
  connect_address: 127.0.0.1:%[4]d
  data_dir: %[5]s/data
  bin_dir: %[6]s
  pgpass: %[5]s/pgpass
  authentication:
    superuser:
      username: postgres
      password: chaos
    replication:
      username: replicator
      password: chaos
    rewind:
      username: postgres
      password: chaos
  parameters:
    unix_socket_directories: '%[5]s'
    fsync: "off"
`, nd.name, nd.restPort, nd.c.etcd, nd.pgPort, nd.dir, binDir, patroniTTL)
}

func (nd *patroniNode) startPatroni() error {
	bin, err := exec.LookPath("patroni")
	if err != nil {
		return err
	}
	p, err := nd.c.start(bin, filepath.Join(nd.dir, "patroni.log"), nd.cfg)
	if err != nil {
		return err
	}
	nd.proc = p
	return nil
}

func (nd *patroniNode) patroniUp() bool { return nd.proc != nil && nd.proc.up() }

func (nd *patroniNode) killPatroni() error {
	if err := nd.proc.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill %s's patroni: %w", nd.name, err)
	}
	<-nd.proc.exited
	return nil
}

// postmasterPID returns the pid of the node's running postmaster (postmaster.pid), or 0.
func (nd *patroniNode) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(nd.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

func (nd *patroniNode) killPostgres() error {
	pid := nd.postmasterPID()
	if pid == 0 {
		return fmt.Errorf("%s: no postmaster running", nd.name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s's postmaster (pid %d): %w", nd.name, pid, err)
	}
	return nil
}

func (nd *patroniNode) url(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", nd.pgPort, dbname)
}

// takesWrites checks that the node's Postgres takes writes (not in recovery).
func (nd *patroniNode) takesWrites(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, nd.url("chaos"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var standby bool
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		return err
	}
	if standby {
		return fmt.Errorf("%s is still in recovery", nd.name)
	}
	return nil
}

// rest calls the node's REST API, decoding a 2xx answer's JSON into out.
func (nd *patroniNode) rest(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(nd.restPort))+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	client := nd.c.http
	if method != http.MethodGet {
		client = &http.Client{} // the context bounds it
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s of %s: HTTP %d: %s", method, path, nd.name, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// tailFile returns the last n lines of the file at path.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
