package journal

import "github.com/stepgate/stepgate/journal/internal/dbsqlc"

// ResumeWaitersSQL exposes the statement that resumes an event's waiters, for its plan.
const ResumeWaitersSQL = dbsqlc.WaitResume

// FinishSQL exposes Finish's statement, for its plan.
const FinishSQL = dbsqlc.RunFinish

// flowKeys are the config's fields of flow control, and usageSum the tenant's usage of
// one column as a subquery (its stripes' sum): SQL fragments that several named
// queries spell out, kept here for the tests that check they agree.
const (
	flowKeys = `array['throttle', 'rate_limit', 'debounce']`
	usageSum = `(SELECT coalesce(sum(u.%s), 0) FROM stepgate.tenant_usage u WHERE u.tenant = %s)`
)

// FlowKeys and UsageSum expose flowKeys and usageSum to the external tests.
const (
	FlowKeys = flowKeys
	UsageSum = usageSum
)

// Queued is how many entries wait for an Appender's write.
func (ap *Appender) Queued() int {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	return len(ap.queue)
}

// Batches is how many of an Appender's writes carried more than one entry.
func (ap *Appender) Batches() int64 { return ap.batches.Load() }

// Names only journal's tests use, exposed to the external tests.
const (
	KindSleep          = kindSleep
	KindInvoke         = kindInvoke
	KindReceive        = kindReceive
	KindWaitEvent      = kindWaitEvent
	KindWaitAny        = kindWaitAny
	AwaitSleep         = awaitSleep
	AwaitInvokeAll     = awaitInvokeAll
	ErrorTypeNotFound  = errorTypeNotFound
	ErrorTypeForbidden = errorTypeForbidden
	DefaultPriority    = defaultPriority
	MaxWaitShapes      = maxWaitShapes
)

// Fence and QueueKey are fence and queueKey, for the external tests.
type (
	Fence    = fence
	QueueKey = queueKey
)

var (
	ErrInvalidTenant = errInvalidTenant
	GetEvent         = getEvent
)
