package journal

import "github.com/stepgate/stepgate/journal/internal/dbsqlc"

// Unstorable exposes unstorable to the external tests.
var Unstorable = unstorable

// MaxPgMessage exposes maxPgMessage to the external tests.
const MaxPgMessage = maxPgMessage

// ResumeWaitersSQL exposes the statement that resumes an event's waiters, for its plan.
const ResumeWaitersSQL = dbsqlc.WaitResume

// FlowKeys and UsageSum expose the SQL fragments that named queries spell out, for the
// tests that check they agree.
const (
	FlowKeys = flowKeys
	UsageSum = usageSum
)

// NamedArgs exposes namedArgs to the external tests.
type NamedArgs = namedArgs

// AppendInOrderSQL and FinishSQL expose two hot statements, for BenchmarkNamedArgs.
const AppendInOrderSQL = appendInOrder

var FinishSQL = finishStatement

// Queued is how many entries wait for an Appender's write.
func (ap *Appender) Queued() int {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	return len(ap.queue)
}

// Batches is how many of an Appender's writes carried more than one entry.
func (ap *Appender) Batches() int64 { return ap.batches.Load() }
