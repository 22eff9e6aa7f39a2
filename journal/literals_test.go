package journal

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// TestQueriesSpellTheKinds checks that the named queries spell out the kinds and the
// channel that journal's constants name.
func TestQueriesSpellTheKinds(t *testing.T) {
	for _, c := range []struct {
		query, literal string
	}{
		{dbsqlc.CallbackJournalAwait, KindAwaitCallback},
		{dbsqlc.CallbackStoreWait, KindAwaitCallback},
		{dbsqlc.CallbackLock, KindAwaitCallback},
		{dbsqlc.CallbackResume, KindAwaitCallback},
		{dbsqlc.MessageDeliveryState, awaitReceive},
		{dbsqlc.MessageStore, kindReceive},
		{dbsqlc.MessageReceive, kindReceive},
		{dbsqlc.RunFinish, NotifyChannel},
		{dbsqlc.RunFinish, kindSleep},
		{dbsqlc.LeaseReapExpired, kindSleep},
		{dbsqlc.LeaseRelease, kindSleep},
		{dbsqlc.EntryInvokeRefused, kindInvoke},
		{dbsqlc.RunsStranded, InvokeJobKind},
		{dbsqlc.RequestPending, KindReply},
		{dbsqlc.RequestForReply, KindReply},
		{dbsqlc.RequestsOfRun, KindReply},
		{dbsqlc.RequestOfRun, KindReply},
		{dbsqlc.RequestCopiedForReply, KindReply},
	} {
		if !strings.Contains(c.query, "'"+c.literal+"'") {
			t.Errorf("%q does not name '%s':\n%s", strings.SplitN(c.query, "\n", 2)[0], c.literal, c.query)
		}
	}
	// The queries of requests take the messages of the topics RequestTopic makes.
	for _, q := range []string{dbsqlc.RequestPending, dbsqlc.RequestsOfRun, dbsqlc.RequestOfRun} {
		if !strings.Contains(q, "LIKE '"+requestTopicPrefix+"%'") {
			t.Errorf("%q does not take the topics LIKE '%s%%'", strings.SplitN(q, "\n", 2)[0], requestTopicPrefix)
		}
	}
}

// TestRunQueriesSpellOutTheirFragments checks that the run's named queries spell out
// what they spliced in before: flowKeys, the tenant's usage of runs, defaultPriority,
// and, in Finish's statements and the recoveries, the same latest pending sleep.
func TestRunQueriesSpellOutTheirFragments(t *testing.T) {
	for _, c := range []struct {
		query, fragment string
	}{
		{dbsqlc.RunCreate, "r.config ?| " + flowKeys + ")"},
		{dbsqlc.RunCreate, fmt.Sprintf(usageSum, "runs", "$16::text") + " < $"},
		{dbsqlc.RunCreate, fmt.Sprintf("(r.config->>'priority')::smallint, %d)", defaultPriority)},
		{dbsqlc.RunCreateRefused, "r.config ?| " + flowKeys + " THEN"},
		{dbsqlc.RunCreateRefused, fmt.Sprintf(usageSum, "runs", "$4") + " AS runs"},
	} {
		if !strings.Contains(c.query, c.fragment) {
			t.Errorf("%q does not spell out %s:\n%s", strings.SplitN(c.query, "\n", 2)[0], c.fragment, c.query)
		}
	}
	// The latest wake time of the sleeps among the run's last 64 entries.
	sleep := func(run string) string {
		return "(SELECT max(CASE WHEN t.kind = '" + kindSleep + "' THEN t.wake_at END) FROM (\n" +
			"                    SELECT e.kind, e.wake_at FROM stepgate.journal_entry e WHERE e.tenant = r.tenant AND e.run_id = " + run + " ORDER BY e.seq DESC LIMIT 64) t)"
	}
	for _, q := range []string{dbsqlc.RunFinish} {
		if !strings.Contains(q, sleep("$9")) {
			t.Errorf("%q does not read the pending sleep as %s", strings.SplitN(q, "\n", 2)[0], sleep("$9"))
		}
	}
	recovered := strings.ReplaceAll(sleep("r.id"), "\n                    ", "\n            ")
	for _, q := range []string{dbsqlc.LeaseReapExpired, dbsqlc.LeaseRelease} {
		if !strings.Contains(q, recovered) {
			t.Errorf("%q does not read the pending sleep as %s", strings.SplitN(q, "\n", 2)[0], recovered)
		}
	}
}
