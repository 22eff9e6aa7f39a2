package ledger

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Cost is what one run of a shape costs.
type Cost struct {
	// HTTP requests: from the client to the gateway (In), from the gateway to the
	// function (Out), and from the function back to the gateway (Back).
	HTTPIn, HTTPOut, HTTPBack int
	// Statements the gateway sent to Postgres (BEGIN and COMMIT included), the round
	// trips they took (a batch is one), and the transactions they ran in (explicit, or
	// a statement or batch sent outside one).
	Statements, RoundTrips, Transactions int
	// Commits of transactions that wrote, and the rows they inserted, updated or
	// deleted, read from the WAL.
	Commits, Rows int
	// WALBytes is the size of the WAL records those transactions wrote (without
	// full-page images); the ledger keeps it in KiB and compares it within WALSlack.
	WALBytes int64
	// Allocs is the gateway's heap allocations (objects), until it has nothing left to
	// do for the run but River jobs waiting for River's scheduler, which moves due jobs
	// every 5 seconds (a sleep's backstop): the wait for it would count the gateway's
	// background work too.
	Allocs int64
	// Details says what the counts are: one line per request, statement name and
	// table.
	Details []Detail
}

// Detail is one line of what a Cost is: Count of Name, of a Kind.
type Detail struct {
	// Kind is "in", "out" or "back" (HTTP requests, Name "METHOD /path"), "stmt"
	// (Name the statement's name), "rows" (rows of table Name inserted, updated or
	// deleted) or "lock" (row locks logged on table Name: shown, not compared, since
	// an upsert locks the row it finds and not the one it inserts).
	Kind  string
	Name  string
	Count int
}

// WALSlack is how far above, or below, its recorded figure a shape's WAL may be
// measured before the ledger counts it as changed: whether an update stays on its page
// (HOT: no index entries) or not, and which index pages split, depend on how full the
// pages are, so a run's WAL moves by up to a KiB with what ran before it. The WAL is a
// coarse figure; rows and commits are the exact ones.
const WALSlack = 0.20

// AllocSlack is how far above, or below, its recorded figure a shape's allocations may
// be measured before the ledger counts them as changed: unlike the other counts, which
// are exact, allocations vary a little from one measurement to the next (up to 3% seen:
// which of a timer and a River job claims a woken run first takes another path).
const AllocSlack = 0.05

// Ledger is the counted cost of each run shape, as the ledger file keeps it.
type Ledger struct {
	// Postgres is the major version of the server that was measured: WAL record sizes
	// differ between majors, so WAL is compared only between equal ones.
	Postgres int
	Shapes   []string // in order
	Costs    map[string]Cost
}

// columns are the table's headings, in order.
var columns = []string{"shape", "http_in", "http_out", "http_back", "stmts", "roundtrips", "tx", "commits", "rows", "wal_kib", "allocs"}

func (c Cost) values() []int64 {
	return []int64{int64(c.HTTPIn), int64(c.HTTPOut), int64(c.HTTPBack), int64(c.Statements), int64(c.RoundTrips),
		int64(c.Transactions), int64(c.Commits), int64(c.Rows), c.WALBytes, c.Allocs}
}

// Header is the start of the ledger file, before its table.
const Header = `# The cost ledger: what one run of each shape costs, counted against a real gateway and a
# real Postgres by TestLedger (go test ./bench/ledger). The test fails when a count
# differs from this file. A change that raises a count updates this file in the same
# commit (go test ./bench/ledger -run TestLedger -update) and says why in its message;
# one that lowers a count updates it too, so that the gain is kept. docs/development.md
# says how to read it; docs/internals.md explains each count.
#
# http_in    requests from the client to the gateway
# http_out   requests from the gateway to the function
# http_back  requests from the function back to the gateway (claim, checkpoints)
# stmts      SQL statements the gateway sent (BEGIN and COMMIT included)
# roundtrips exchanges with Postgres (a batch of statements is one)
# tx         transactions (explicit, or a statement sent outside one)
# commits    commits of transactions that wrote (each waits for the WAL flush)
# rows       rows inserted, updated or deleted (from the WAL)
# wal_kib    WAL those transactions wrote, without full-page images (compared with a 20% slack)
# allocs     the gateway's heap allocations (compared with a 5% slack)
`

// Write writes l in the ledger file's form.
func (l Ledger) Write(w io.Writer) error {
	b := &strings.Builder{}
	b.WriteString(Header)
	fmt.Fprintf(b, "#\n# postgres %d\n\n", l.Postgres)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(columns, "\t"))
	for _, s := range l.Shapes {
		c := l.Costs[s]
		cells := []string{s}
		for i, v := range c.values() {
			if columns[i+1] == "wal_kib" {
				cells = append(cells, strconv.FormatFloat(float64(v)/1024, 'f', 1, 64))
				continue
			}
			cells = append(cells, strconv.FormatInt(v, 10))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range l.Shapes {
		fmt.Fprintf(b, "\n## %s\n", s)
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		for _, d := range l.Costs[s].Details {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", d.Kind, d.Name, d.Count)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Parse reads a ledger file.
func Parse(r io.Reader) (Ledger, error) {
	l := Ledger{Costs: map[string]Cost{}}
	sc := bufio.NewScanner(r)
	section := ""
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "# postgres "); ok {
			if _, err := fmt.Sscan(v, &l.Postgres); err != nil {
				return l, fmt.Errorf("line %d: postgres version: %w", n, err)
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "# ") || line == "#" {
			continue
		}
		if s, ok := strings.CutPrefix(line, "## "); ok {
			if _, ok := l.Costs[s]; !ok {
				return l, fmt.Errorf("line %d: details of %q, a shape the table does not have", n, s)
			}
			section = s
			continue
		}
		f := strings.Fields(line)
		if section == "" {
			if f[0] == columns[0] {
				if !slices.Equal(f, columns) {
					return l, fmt.Errorf("line %d: the table's columns are %q, not %q", n, f, columns)
				}
				continue
			}
			if len(f) != len(columns) {
				return l, fmt.Errorf("line %d: %d cells, not %d", n, len(f), len(columns))
			}
			var v [10]float64
			for i := range v {
				x, err := strconv.ParseFloat(f[i+1], 64)
				if err != nil {
					return l, fmt.Errorf("line %d: %s: %w", n, columns[i+1], err)
				}
				v[i] = x
			}
			l.Shapes = append(l.Shapes, f[0])
			l.Costs[f[0]] = Cost{HTTPIn: int(v[0]), HTTPOut: int(v[1]), HTTPBack: int(v[2]), Statements: int(v[3]),
				RoundTrips: int(v[4]), Transactions: int(v[5]), Commits: int(v[6]), Rows: int(v[7]),
				WALBytes: int64(v[8] * 1024), Allocs: int64(v[9])}
			continue
		}
		if len(f) < 3 {
			return l, fmt.Errorf("line %d: a detail is KIND NAME COUNT", n)
		}
		count, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			return l, fmt.Errorf("line %d: count: %w", n, err)
		}
		c := l.Costs[section]
		c.Details = append(c.Details, Detail{Kind: f[0], Name: strings.Join(f[1:len(f)-1], " "), Count: count})
		l.Costs[section] = c
	}
	return l, sc.Err()
}

// Change is one way a measured ledger differs from the file.
type Change struct {
	Shape, What string
	Was, Is     int64
}

// Rose reports whether the change is a rise: a count that went up, or something the
// file does not have.
func (c Change) Rose() bool { return c.Is > c.Was }

func (c Change) String() string {
	verb := "fell"
	if c.Rose() {
		verb = "rose"
	}
	return fmt.Sprintf("%s: %s %s from %d to %d", c.Shape, c.What, verb, c.Was, c.Is)
}

// Compare lists how measured differs from the file: every count that differs (the
// allocations only beyond AllocSlack above or below the file's figure, the WAL only
// beyond WALSlack and when both were measured on the same Postgres major), every detail
// line that differs but row locks, and shapes that one has and the other does not.
func Compare(file, measured Ledger) []Change {
	var out []Change
	for _, s := range union(file.Shapes, measured.Shapes) {
		was, inFile := file.Costs[s]
		is, inMeasured := measured.Costs[s]
		switch {
		case !inFile:
			out = append(out, Change{Shape: s, What: "the shape (not in the file)", Was: 0, Is: 1})
			continue
		case !inMeasured:
			out = append(out, Change{Shape: s, What: "the shape (not measured)", Was: 1, Is: 0})
			continue
		}
		wv, iv := was.values(), is.values()
		for i := range wv {
			name := columns[i+1]
			switch name {
			case "allocs":
				if within(wv[i], iv[i], AllocSlack) {
					continue
				}
			case "wal_kib":
				if file.Postgres != measured.Postgres || within(wv[i], iv[i], WALSlack) {
					continue
				}
				name = "wal (bytes)"
			}
			if wv[i] != iv[i] {
				out = append(out, Change{Shape: s, What: name, Was: wv[i], Is: iv[i]})
			}
		}
		wd, id := details(was.Details), details(is.Details)
		for _, k := range union(slices.Sorted(maps.Keys(wd)), slices.Sorted(maps.Keys(id))) {
			if wd[k] != id[k] {
				out = append(out, Change{Shape: s, What: k, Was: int64(wd[k]), Is: int64(id[k])})
			}
		}
	}
	return out
}

// within reports whether is lies within slack (a fraction) of was.
func within(was, is int64, slack float64) bool {
	return float64(is) <= float64(was)*(1+slack) && float64(is) >= float64(was)*(1-slack)
}

func details(ds []Detail) map[string]int {
	m := map[string]int{}
	for _, d := range ds {
		if d.Kind != "lock" {
			m[d.Kind+" "+d.Name] += d.Count
		}
	}
	return m
}

// union returns a's elements, then those of b that a lacks.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
