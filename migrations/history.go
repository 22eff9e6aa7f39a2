package migrations

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// baselineVersion is the version of the baseline, 0000_baseline.sql: the schema that
// the migrations before it (history) made, written out once. Version 0 was never
// recorded by those migrations, so a database that applied them holds no row that the
// baseline's could be mistaken for.
const baselineVersion = 0

// historyLast is the last version the baseline replaces; the migrations after it are
// numbered from historyLast+1 on.
const historyLast = 45

// history are the migrations the baseline replaces, as stepgate.schema_migration of a
// database they made records them (versions 2, 33 and 36 were never committed): the file
// name and the SHA-256 of its text. Their texts are kept as test data
// (testdata/history, TestHistoryIsKept), not in the binary.
var history = []struct{ name, checksum string }{
	{"0001_create_core.sql", "6e8247e729f10b8447d6030599a3c27b50a914c407ee3768bea325c779932e90"},
	{"0003_run_events.sql", "3b2ad970d03c177beb100ec0fcf9e90484334d11f85687748d44ec6aefcea604"},
	{"0004_row_level_security.sql", "db878f456d8549c907ae7f6f0bd88145aa3aa0664a41ee3ab1751b5a4315456c"},
	{"0005_child_runs.sql", "76007ac46a134bae1fc6af02a3f7eba9cffcb6d723f900213e190ba2cc9ae253"},
	{"0006_events.sql", "305f92c0a0ecbe9df6ed21feaac5116c3422211e7e5dd513a9258b8da079047c"},
	{"0007_schedules.sql", "3860e66431521f7fbbed51e453bce708630d9078634b2e3a12640067957a2a18"},
	{"0008_run_indexes_ascending.sql", "d393a0da6359d623dff5d02b1b917e21ec263738a0f1f1d734f845c814585493"},
	{"0009_run_by_idempotency_key.sql", "7578ba4de5739e16061d334fb2e309497d45a71f7298fb9dcc04f2d834252e0f"},
	{"0010_keys.sql", "fa72c6b86b3bbb7aa5dce66faf1dcd3f2e954efa5c6b4625863d95a68d87fc9e"},
	{"0011_journal_bytes.sql", "38e7a15472a02cf7652d978e169c497e2d9449dd52d3e4701109d3f1277efe21"},
	{"0012_run_due.sql", "9fb6daabf09773d313a7c6c18562ac53a9f07b73d4ccfb87c0db4adb1e517843"},
	{"0013_cancelled_by.sql", "43957ae2276d1aeaa49c13f0f69ab3daac8bd6c017af5a14989929fc2ba169aa"},
	{"0014_schedule_catchup.sql", "eab4f3260031cf3e38db7de6717916ca310e24663e123b910202fb0076f37615"},
	{"0015_recoveries.sql", "739ee907909694a322f4fd9def6fc75c3c5a09d71d48a0f0eac2d64b8fed1b7b"},
	{"0016_run_awaiting.sql", "641e253bf3513e2f95f9f79035c3780c67a827853d26492a3a34675f5fce3839"},
	{"0017_run_event_trigger.sql", "62c76d4fc9a9c47673ec95f79594844861a4499e8fdb2babdb6fac10df08a071"},
	{"0018_sql_functions.sql", "c253920e1643cca672b372156a22203b22630223756065b929afc5c9c8242a19"},
	{"0019_child_end_wakes_parent.sql", "1a11841c86ac022626bd46e06357f59547577fc8a72aaebf4f57c2bb99cdabf9"},
	{"0020_event_waits.sql", "bd383ff15d08212c9f81fc5693a26ab0018b797bc63a16e7e608fe5590c4c058"},
	{"0021_values_streams.sql", "90f3c82d72764d56161812e61d11434d3ace97ac3d06a1ea4f56a1f90618dfff"},
	{"0022_callbacks.sql", "a276d416a0919445d9c08960cb959797d53a3a1f1401aafbd99e6effad64ead2"},
	{"0023_messages.sql", "597987d30267465bc8a6557240e09c2a1258c85e7e4cebd6b9c6636d23d3a0a1"},
	{"0024_wait_any.sql", "270bbf36539df00cef3dac821543cec384e071f3b98fa506b382dc40cbf91a72"},
	{"0025_deadlines.sql", "6d24b4e6d51a92b8a0dcabf00bab66a686d322cab37a7d52fd6a779bcbce47f8"},
	{"0026_cancel_trees.sql", "7d8d9b6ac9239a374f8072385597049e0a54f0791bf583f8c212506f8302fcd1"},
	{"0027_copied_entries.sql", "9c5d469f6decb8acd7ca807715def441ea859054874d9ed93ad78ba70a61b5d7"},
	{"0028_run_held.sql", "fca1ddc3643bf12d52410a899e1479fa460a834c801ad53157af24a851d91924"},
	{"0029_concurrency_limits.sql", "e115c8b15cd0aecd1e5b04086748579ae5d76eec6598734cace5b86d34cb1d04"},
	{"0030_flow_rate.sql", "980e8f47bc93736f89833a8441528170d37f7a120648b0bec7327b1b86c78cf4"},
	{"0031_run_priority.sql", "5d3555a23bd3241b473341dacdd323ec89810a1def2273a7dca97812b4678f1c"},
	{"0032_parallel.sql", "77eb0148b22e36dcf6e1fe7a054ef995197547a0579d54d4267087ea26d7cacb"},
	{"0034_schema_migration_readable.sql", "505cdc9e629c2d2a8aa628152a4fc72d8d034ff963b624fa7ffff4150bc7d20a"},
	{"0035_retention.sql", "faf26b4440580d3912edb0fbcd63128f3c93c1e1d8fc486bfffcbc77e48e0b2f"},
	{"0037_concurrency_stripes.sql", "62d5246aad8a9fc57012c132169c1d437871312fbf11e4c5d47b6f686e5bd1dc"},
	{"0038_slot_fast_paths.sql", "a473dad3eeb20016bc86f8675e59996b8ed5ebf7b61f15c81eeacb3b85cc4d6b"},
	{"0039_concurrency_counted.sql", "5012eb53ac74d6fd155c8e12cef73e7f1b2ffe208125f8b5ebd855d85fbda61a"},
	{"0040_lifetime_counts.sql", "0d0623d5e9c22d0d8bf72d6fc65bb051ea2761ba0fb6d8545b0f7465126bfa5b"},
	{"0041_run_deadline_index.sql", "1b0199d988f2208ee818dff4e380cb21d88badfdd3cbd61e6925e573e75cb0dc"},
	{"0042_may_resume.sql", "a48dc8b4ec1cf5cb6cb3e310fc1aca27fab17e83dbd5204082f90400c521e80a"},
	{"0043_callback_tokens_sealed.sql", "76ebf43e3de4b3b61abe9acf47df9435ea32604a69811f110d5146b9a7364121"},
	{"0044_tenant_usage.sql", "000594f695de86a6fe812a430f65ad5c01c8de19752a8568ea3d1c1cc10b7967"},
	{"0045_invocation_owner.sql", "2142b8815315c27cdefe4760de723d3659c5335ec369878a024d7ac7f4f7401e"},
}

// historyName is the name of the history file of version v, "" if none.
func historyName(v int) string {
	for _, h := range history {
		if historyVersion(h.name) == v {
			return h.name
		}
	}
	return ""
}

// historyVersion is the version in a history file's name.
func historyVersion(name string) int {
	var v int
	fmt.Sscanf(name, "%04d_", &v)
	return v
}

// adoptHistory brings a database that migrations 0001-0045 made to the baseline: when
// stepgate.schema_migration records every one of them (file name and, where recorded,
// checksum as in history), it replaces their rows with the baseline's, without running
// the baseline, in one transaction; the migrations after the baseline then apply as on
// any database. A database that recorded only some of them (migrated by a build older
// than the last one before the baseline and never since) is refused, naming what it
// lacks: the baseline would skip the rest. A database that recorded none is left
// alone. conn must hold the migration lock.
func adoptHistory(ctx context.Context, conn *pgx.Conn, baseline migration) error {
	type row struct {
		Version   int
		Name      string
		Checksum  *string
		AppliedAt time.Time
	}
	rows, _ := conn.Query(ctx, `SELECT version, name, checksum, applied_at FROM stepgate.schema_migration
		WHERE version BETWEEN 1 AND $1 ORDER BY version`, historyLast) // err resurfaces below
	recorded, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return fmt.Errorf("migrations: list applied: %w", err)
	}
	if len(recorded) == 0 {
		return nil
	}
	want := make(map[int]string, len(history))
	for _, h := range history {
		want[historyVersion(h.name)] = h.checksum
	}
	var last time.Time
	have := make(map[string]bool, len(recorded))
	for _, r := range recorded {
		sum, ok := want[r.Version]
		if !ok || historyName(r.Version) != r.Name {
			return fmt.Errorf("migrations: this database applied %s as version %d, which is not on stepgate's history "+
				"(migrations/testdata/history); it was migrated by a build of another branch: recreate it", r.Name, r.Version)
		}
		if r.Checksum != nil && *r.Checksum != sum {
			return &ChangedError{Name: r.Name, Applied: *r.Checksum, Embedded: sum}
		}
		have[r.Name] = true
		if r.AppliedAt.After(last) {
			last = r.AppliedAt
		}
	}
	var missing []string
	for _, h := range history {
		if !have[h.name] {
			missing = append(missing, h.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("migrations: this database applied only %d of the %d migrations that %s replaces; it lacks %s. "+
			"This build adopts a database only at the schema of the last build before the baseline: "+
			"migrate it with that build first (stepgate migrate; in git, the parent of the commit that added "+
			"migrations/0000_baseline.sql), then start this one; "+
			"or, as no release preceded the baseline, recreate the database",
			len(history)-len(missing), len(history), baseline.name, strings.Join(missing, ", "))
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM stepgate.schema_migration WHERE version BETWEEN 1 AND $1`, historyLast); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO stepgate.schema_migration (version, name, checksum, applied_at) VALUES ($1, $2, $3, $4)`,
			baseline.version, baseline.name, baseline.checksum(), last)
		return err
	})
	if err != nil {
		return fmt.Errorf("migrations: record %s in place of the migrations it replaces: %w", baseline.name, err)
	}
	return nil
}

// baselineOf returns the baseline among ms.
func baselineOf(ms []migration) (migration, bool) {
	for _, m := range ms {
		if m.version == baselineVersion {
			return m, true
		}
	}
	return migration{}, false
}
