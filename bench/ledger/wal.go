package ledger

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// WAL is what one database's transactions wrote to the write-ahead log between two
// positions, read back with pg_walinspect (PostgreSQL 15 and later; superuser).
//
// A transaction is the database's when it wrote a row of one of the database's own
// tables (not its catalog's: autovacuum's statistics are not an operation's), and not
// of a table the caller leaves out (a background service's). What other databases of the
// server and records of no transaction (checkpoints, page pruning, hint bits) wrote is
// not counted, so the figures do not depend on what else the server does.
type WAL struct {
	// Commits counts the commit records of the database's transactions that wrote a
	// row: each is a commit that waited for the log to be flushed (synchronous_commit
	// on). LockCommits counts those of transactions that only locked rows: an UPDATE
	// that waited on a row another transaction changed locks it before it finds the
	// row no longer matches, so whether a statement that lost a race commits depends on
	// timing.
	Commits, LockCommits int
	// Aborts counts the abort records of transactions that wrote and rolled back.
	Aborts int
	// Tables holds the rows written per table (schema.table).
	Tables map[string]Rows
	// Bytes is the size of the transactions' records, without full-page images (which
	// depend on when the last checkpoint was) and without sequence records (logged once
	// every 32 values).
	Bytes int64
	// Records lists the counted records, one line each ("xid 812 Heap INSERT
	// stepgate.run"), to see what a count is made of.
	Records []string
}

// Rows counts the rows a transaction wrote to one table, by kind.
type Rows struct {
	Inserted, Updated, Deleted int
	// Locked counts row locks that were logged: SELECT … FOR UPDATE or FOR SHARE, and
	// the key-share locks of foreign-key checks.
	Locked int
}

// Written returns the rows inserted, updated and deleted.
func (r Rows) Written() int { return r.Inserted + r.Updated + r.Deleted }

// RowsWritten returns the rows written to every table.
func (w WAL) RowsWritten() int {
	n := 0
	for _, r := range w.Tables {
		n += r.Written()
	}
	return n
}

// WALPosition returns the server's current WAL insert position, to read from.
func WALPosition(ctx context.Context, conn *pgx.Conn) (string, error) {
	var lsn string
	err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn)
	return lsn, err
}

// WALFlushed returns the server's current WAL flush position, to read up to: every
// commit that has returned is before it.
func WALFlushed(ctx context.Context, conn *pgx.Conn) (string, error) {
	var lsn string
	err := conn.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&lsn)
	return lsn, err
}

// walRecord is a row of pg_get_wal_records_info.
type walRecord struct {
	xid                    uint32
	manager, kind          string
	length, fpi            int64
	description, blockRefs string
}

var (
	relRef    = regexp.MustCompile(`rel \d+/(\d+)/(\d+)`)
	subxacts  = regexp.MustCompile(`subxacts: ([\d ]+)`)
	ntuples   = regexp.MustCompile(`ntuples: (\d+)`)
	heapWrite = map[string]func(*Rows, int){
		"INSERT":     func(r *Rows, n int) { r.Inserted += n },
		"UPDATE":     func(r *Rows, n int) { r.Updated += n },
		"HOT_UPDATE": func(r *Rows, n int) { r.Updated += n },
		"DELETE":     func(r *Rows, n int) { r.Deleted += n },
		"LOCK":       func(r *Rows, n int) { r.Locked += n },
	}
)

// ReadWAL reads the records between from and to (positions from [WALPosition] and
// [WALFlushed]) and sums those of the transactions of the database conn is connected
// to, leaving out every transaction that wrote to a table in skip.
func ReadWAL(ctx context.Context, conn *pgx.Conn, from, to string, skip func(table string) bool) (WAL, error) {
	var dbOID uint32
	if err := conn.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = current_database()`).Scan(&dbOID); err != nil {
		return WAL{}, fmt.Errorf("ledger: database oid: %w", err)
	}
	tables, err := userTables(ctx, conn)
	if err != nil {
		return WAL{}, err
	}
	rows, err := conn.Query(ctx, `
		SELECT coalesce(xid::text::bigint, 0), resource_manager, record_type, record_length, fpi_length,
		       coalesce(description, ''), coalesce(block_ref, '')
		FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)`, from, to)
	if err != nil {
		return WAL{}, fmt.Errorf("ledger: read WAL (CREATE EXTENSION pg_walinspect, as a superuser): %w", err)
	}
	var records []walRecord
	for rows.Next() {
		var r walRecord
		var xid int64
		if err := rows.Scan(&xid, &r.manager, &r.kind, &r.length, &r.fpi, &r.description, &r.blockRefs); err != nil {
			return WAL{}, fmt.Errorf("ledger: read WAL: %w", err)
		}
		r.xid = uint32(xid)
		records = append(records, r)
	}
	if err := rows.Err(); err != nil {
		return WAL{}, fmt.Errorf("ledger: read WAL: %w", err)
	}

	// The transactions that wrote to the database's tables, those left out, and those
	// that wrote a row (not only locks).
	ours, skipped, wrote := map[uint32]bool{}, map[uint32]bool{}, map[uint32]bool{}
	for _, r := range records {
		for _, m := range relRef.FindAllStringSubmatch(r.blockRefs, -1) {
			db, _ := strconv.ParseUint(m[1], 10, 32)
			node, _ := strconv.ParseUint(m[2], 10, 32)
			table, ok := tables[uint32(node)]
			if uint32(db) != dbOID || !ok || r.xid == 0 {
				continue
			}
			if skip != nil && skip(table) {
				skipped[r.xid] = true
			}
			ours[r.xid] = true
			if kind, _, _ := strings.Cut(r.kind, "+"); kind != "LOCK" && (r.manager == "Heap" || r.manager == "Heap2") {
				wrote[r.xid] = true
			}
		}
	}
	counted := func(xid uint32) bool { return ours[xid] && !skipped[xid] }
	w := WAL{Tables: map[string]Rows{}}
	for _, r := range records {
		if r.manager == "Transaction" && (strings.HasPrefix(r.kind, "COMMIT") || strings.HasPrefix(r.kind, "ABORT")) {
			// A transaction's subtransactions (savepoints) wrote under their own ids.
			mine, rows := counted(r.xid), wrote[r.xid]
			if m := subxacts.FindStringSubmatch(r.description); m != nil {
				for _, f := range strings.Fields(m[1]) {
					if x, err := strconv.ParseUint(f, 10, 32); err == nil && counted(uint32(x)) {
						mine, rows = true, rows || wrote[uint32(x)]
					}
				}
			}
			switch {
			case !mine:
				continue
			case strings.HasPrefix(r.kind, "ABORT"):
				w.Aborts++
			case rows:
				w.Commits++
			default:
				w.LockCommits++
			}
			w.Bytes += r.length - r.fpi
			w.Records = append(w.Records, fmt.Sprintf("xid %d %s %s", r.xid, r.manager, r.kind))
			continue
		}
		if !counted(r.xid) || r.manager == "Sequence" {
			continue
		}
		w.Bytes += r.length - r.fpi
		table := ""
		if m := relRef.FindStringSubmatch(r.blockRefs); m != nil {
			node, _ := strconv.ParseUint(m[2], 10, 32)
			table = tables[uint32(node)]
		}
		w.Records = append(w.Records, fmt.Sprintf("xid %d %s %s %s", r.xid, r.manager, r.kind, table))
		kind, _, _ := strings.Cut(r.kind, "+") // "INSERT+INIT": the first tuple of a new page
		add := heapWrite[kind]
		n := 1
		switch {
		case r.manager == "Heap2" && kind == "MULTI_INSERT":
			add = heapWrite["INSERT"]
			if m := ntuples.FindStringSubmatch(r.description); m != nil {
				n, _ = strconv.Atoi(m[1])
			}
		case r.manager != "Heap":
			add = nil
		}
		if add == nil {
			continue
		}
		if table != "" {
			rows := w.Tables[table]
			add(&rows, n)
			w.Tables[table] = rows
		}
	}
	return w, nil
}

// userTables maps the file nodes of the database's own tables, and of their TOAST
// tables, to their names (schema.table; a TOAST table's is its table's with "(toast)").
func userTables(ctx context.Context, conn *pgx.Conn) (map[uint32]string, error) {
	rows, err := conn.Query(ctx, `
		SELECT pg_relation_filenode(c.oid)::bigint, n.nspname || '.' || c.relname
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
		  AND n.nspname NOT LIKE 'pg_toast%' AND pg_relation_filenode(c.oid) IS NOT NULL
		UNION ALL
		SELECT pg_relation_filenode(c.reltoastrelid)::bigint, n.nspname || '.' || c.relname || '(toast)'
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p', 'm') AND c.reltoastrelid <> 0
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema')`)
	if err != nil {
		return nil, fmt.Errorf("ledger: tables: %w", err)
	}
	tables := map[uint32]string{}
	for rows.Next() {
		var node int64
		var name string
		if err := rows.Scan(&node, &name); err != nil {
			return nil, fmt.Errorf("ledger: tables: %w", err)
		}
		tables[uint32(node)] = name
	}
	return tables, rows.Err()
}

// TableNames returns the tables of w in order.
func (w WAL) TableNames() []string { return slices.Sorted(maps.Keys(w.Tables)) }
