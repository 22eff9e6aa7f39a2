package journal

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// Append is one entry for AppendEntries or an Appender: what AppendEntry takes.
type Append struct {
	RunID      string
	Invocation int
	Entry      Entry
	Bounds     Bounds
}

// maxBatch is the most entries AppendEntries writes in one round trip; an Appender
// gathers at most this many into one write.
const maxBatch = 64

// AppendEntries journals entries of different runs, giving each the error AppendEntry
// would have given it alone (errs[i] is as[i]'s). The entries right after their
// journals' last (no window) are sent to Postgres as one pipelined batch of
// AppendEntry's statement, which runs as one implicit transaction: one round trip and
// one commit for them all, and each is durable when AppendEntries returns nil for it.
// That statement refuses an entry without raising an error (a conflict, a gap, a bound,
// a lost lease: each entry's own answer), so one entry's refusal leaves the others'
// writes alone. An entry the batch could not settle is written alone, as AppendEntry
// writes it: one whose run's row was locked (the batch waits for no lock); one whose
// statement raised an error all the same (a value Postgres cannot store), which rolls
// the batch back, and the others then go again together; all of them when the
// connection failed. Entries with a window, past maxBatch, or on a transaction are
// written one by one.
func AppendEntries(ctx context.Context, db DB, as []Append) []error {
	errs := appendBatch(ctx, db, as)
	for i, err := range errs {
		errs[i] = settle(ctx, db, as[i], err)
	}
	return errs
}

// settle returns err, appendBatch's answer for a, but for errAlone: then it writes a
// alone (in the caller's goroutine, for an Appender, so a write that waits for a lock
// holds no writer).
func settle(ctx context.Context, db DB, a Append, err error) error {
	if err == errAlone {
		return AppendEntry(ctx, db, a.RunID, a.Invocation, a.Entry, a.Bounds)
	}
	return err
}

// errAlone is appendBatch's answer for an entry it did not settle: write it alone.
var errAlone = errors.New("journal: write the entry alone")

// appendBatch is AppendEntries but for the entries to write alone, errAlone. It waits
// for no row lock, so a write of it ends in about a round trip and a commit.
func appendBatch(ctx context.Context, db DB, as []Append) []error {
	errs := make([]error, len(as))
	var batched []int
	_, inTx := db.(pgx.Tx)
	for i, a := range as {
		switch {
		case inTx || a.Entry.Window > 1 || len(batched) == maxBatch:
			errs[i] = errAlone
		default:
			if errs[i] = entryTooLarge(a.Entry, a.Bounds); errs[i] == nil {
				batched = append(batched, i)
			}
		}
	}
	for len(batched) > 0 {
		failed, err := sendBatch(ctx, db, as, batched, errs)
		if err == nil {
			break
		}
		// The batch was rolled back: the failed statement's entry is written alone (and
		// fails there as it did here); the others go again together. So a value Postgres
		// cannot store costs its neighbours one round trip, not a write each.
		errs[batched[failed]] = errAlone
		batched = append(batched[:failed:failed], batched[failed+1:]...)
	}
	return errs
}

// sendBatch writes the entries as[batched...] as one pipelined batch and sets their
// errs. When a statement raised an error (the whole batch is rolled back), it returns
// that error and the statement's index in batched; when the batch's outcome is unknown
// (the connection failed), it sets every entry's error to errAlone and returns nil.
func sendBatch(ctx context.Context, db DB, as []Append, batched []int, errs []error) (failed int, err error) {
	batch := &pgx.Batch{}
	// Within the batch, a statement waits at most 50 ms for a lock. The batch takes no
	// row lock that it would wait for (EntryAppendInOrder's skip_locked), but an insert
	// waits for a concurrent uncommitted insert of the same entry (an answer carrying a
	// step its function also checkpointed); past the timeout that entry is written
	// alone, and the write goes on for the others.
	batch.Queue(dbsqlc.EntryBatchLockTimeout, dbsqlc.EntryBatchLockTimeoutParams{}.Args()...)
	for _, i := range batched {
		a, e := as[i], as[i].Entry
		batch.Queue(dbsqlc.EntryAppendInOrder, dbsqlc.EntryAppendInOrderParams{
			SkipLocked: true, RunID: a.RunID, Seq: int32(e.Seq), Invocation: int32(a.Invocation), Size: e.Size(),
			Kind: e.Kind, Name: e.Name, Output: e.Output, Error: errorJSON(e.Error), Attempt: int32(max(e.Attempt, 1)),
			WakeAt: e.WakeAt, StartedAt: e.StartedAt, MaxEntries: int4(a.Bounds.MaxEntries), MaxBytes: int4(a.Bounds.MaxJournalBytes),
		}.Args()...)
	}
	results := make([]appendResult, len(batched))
	br := db.SendBatch(ctx, batch)
	failed = -1
	if _, err = br.Exec(); err == nil {
		for j := range batched {
			if err = results[j].scan(br.QueryRow()); err != nil {
				failed = j
				break
			}
		}
	}
	// Close reads to the batch's end: nil once its implicit transaction has committed.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	var pgErr *pgconn.PgError
	if failed >= 0 && errors.As(err, &pgErr) && len(batched) > 1 {
		return failed, err
	}
	for j, i := range batched {
		a := as[i]
		switch {
		case err != nil:
			// Rolled back or, with the connection lost, perhaps committed: then its
			// write alone is an identical repeat, a no-op.
			errs[i] = errAlone
		case !results[j].owned:
			// Not owned, or its run's row was locked: alone, waiting for the lock.
			errs[i] = errAlone
		default:
			errs[i] = results[j].err(ctx, db, a.RunID, a.Entry, 1, a.Bounds)
		}
	}
	return 0, nil
}

// An Appender gathers the checkpoints of concurrent invocations into shared writes
// (group commit): at most its limit of writes are in flight, each taking every entry
// queued when it starts (up to maxBatch) and journaling them with AppendEntries. An
// entry that finds a write free is written at once, alone, in its caller's goroutine,
// so a lone checkpoint waits for nothing; entries that arrive while all writes are in
// flight wait for the next, and share its round trip and its commit. Each caller is answered when its entry is
// durable (or refused), with AppendEntry's error for it alone.
type Appender struct {
	db       DB
	limit    int
	timeout  time.Duration
	mu       sync.Mutex
	queue    []*pendingAppend
	inFlight int
	batches  atomic.Int64 // writes of more than one entry, for tests
}

// NewAppender returns an Appender writing on db (a pool) with at most limit writes in
// flight (at least 1). A write is bounded by timeout: it outlives the callers whose
// entries it carries, so none of their contexts can cancel it for the others.
func NewAppender(db DB, limit int, timeout time.Duration) *Appender {
	return &Appender{db: db, limit: max(limit, 1), timeout: timeout}
}

type pendingAppend struct {
	a       Append
	ctx     context.Context
	done    chan error // buffered: the writer never waits for the caller
	claimed atomic.Bool
}

// Append journals a's entry as AppendEntry does, in a write shared with other
// callers' entries when writes are in flight. When ctx ends first it returns ctx's
// error; an entry a write had taken by then may still be journaled (as a statement
// cancelled on its way may still commit), one not yet taken is not written.
func (ap *Appender) Append(ctx context.Context, a Append) error {
	if a.Entry.Window > 1 {
		return AppendEntry(ctx, ap.db, a.RunID, a.Invocation, a.Entry, a.Bounds)
	}
	ap.mu.Lock()
	if ap.inFlight < ap.limit && len(ap.queue) == 0 {
		// A write is free: this entry's, in the caller's goroutine.
		ap.inFlight++
		ap.mu.Unlock()
		err := appendBatch(ctx, ap.db, []Append{a})[0]
		ap.mu.Lock()
		if len(ap.queue) > 0 {
			go ap.write() // entries came meanwhile: the write goes on for them
		} else {
			ap.inFlight--
		}
		ap.mu.Unlock()
		return settle(ctx, ap.db, a, err)
	}
	p := &pendingAppend{a: a, ctx: ctx, done: make(chan error, 1)}
	ap.queue = append(ap.queue, p)
	start := ap.inFlight < ap.limit
	if start {
		ap.inFlight++
	}
	ap.mu.Unlock()
	if start {
		go ap.write()
	}
	select {
	case err := <-p.done:
		return settle(ctx, ap.db, a, err)
	case <-ctx.Done():
		p.claimed.Store(true) // if not taken yet, the writer skips it
		return ctx.Err()
	}
}

// write journals what is queued, batch by batch, until the queue is empty.
func (ap *Appender) write() {
	for {
		ap.mu.Lock()
		n := min(len(ap.queue), maxBatch)
		if n == 0 {
			ap.inFlight--
			ap.mu.Unlock()
			return
		}
		taken := ap.queue[:n:n]
		ap.queue = ap.queue[n:]
		if len(ap.queue) == 0 {
			ap.queue = nil
		}
		ap.mu.Unlock()

		var ps []*pendingAppend
		var as []Append
		for _, p := range taken {
			if p.claimed.CompareAndSwap(false, true) { // else its caller has given up
				ps, as = append(ps, p), append(as, p.a)
			}
		}
		if len(ps) == 0 {
			continue
		}
		if len(ps) > 1 {
			ap.batches.Add(1)
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ps[0].ctx), ap.timeout)
		errs := appendBatch(ctx, ap.db, as)
		cancel()
		for i, p := range ps {
			p.done <- errs[i]
		}
	}
}
