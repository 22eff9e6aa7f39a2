#!/bin/sh
# Measures the charts' statements (journal/queries/run_series.sql) on a database seeded
# by seed.sql, as the API role with tenant t1, with EXPLAIN (ANALYZE, BUFFERS); prints
# each plan's execution time (and the whole plan with PLAN=1). See
# docs/benchmarks-history.md ("Charts' series: what a read costs").
#   DB=postgres://postgres@127.0.0.1:5432/charts_bench bench/charts/measure.sh
set -eu
DB=${DB:-postgres://postgres@127.0.0.1:5432/charts_bench}
Q=$(dirname "$0")/../../journal/queries/run_series.sql

# query NAME: the named query's statement.
query() { awk -v n="$1" '/^-- name: /{on = ($3 == n); next} on && !/^--/' "$Q"; }

# explain WHAT ROLE SQL...: EXPLAIN (ANALYZE, BUFFERS) of SQL, three times.
explain() {
	what=$1 role=$2; shift 2
	for i in 1 2 3; do
		out=$(printf 'SET ROLE %s; SET stepgate.tenant = %s; EXPLAIN (ANALYZE, BUFFERS) %s' "$role" "'t1'" "$*" | psql -X -q "$DB" 2>&1)
		if [ "${PLAN:-}" = 1 ] && [ "$i" = 3 ]; then echo "$out"; fi
		echo "$what: $(echo "$out" | grep -E 'Execution Time|ERROR')"
	done
}

# buckets FUNCTION SECS N SEALED: FunctionSeriesBuckets with its parameters, as
# journal.FunctionSeries computes them (since from now; raw_from after the sealed
# buckets when SEALED), as literals.
buckets() {
	since=$(psql -X -qAt "$DB" -c "SELECT date_bin(make_interval(secs => $2), now(), timestamptz '1970-01-01 00:00:00+00') - make_interval(secs => $2 * ($3 - 1))")
	raw=$since
	if [ "$4" = true ]; then
		raw=$(psql -X -qAt "$DB" -c "SELECT greatest('$since'::timestamptz, (SELECT max(at) + interval '15 minutes' FROM stepgate.run_series WHERE tenant = 't1' AND function = ''))")
	fi
	query FunctionSeriesBuckets | sed -e "s/@tenant/'t1'/g; s/sqlc.narg(function)/$1/g; s/@bucket_secs/$2/g; s/@since/'$since'/g; s/@raw_from/'$raw'/g"
}

if [ "${SEAL:-}" = 1 ]; then
	# The job's pass: SeriesPass (16) quarters, as the system role.
	explain "SeriesSeal 16 quarters" stepgate_system "$(query SeriesSeal | sed -e 's/@grace_secs/120/g; s/sqlc.arg(max_buckets)/16/g')"
	exit 0
fi
explain "1h, one function" stepgate_app "$(buckets "'f1'" 60 60 false)"
explain "1h, all functions" stepgate_app "$(buckets NULL 60 60 false)"
explain "1d, one function, raw" stepgate_app "$(buckets "'f1'" 900 96 false)"
explain "1d, all functions, raw" stepgate_app "$(buckets NULL 900 96 false)"
explain "1d, one function, sealed" stepgate_app "$(buckets "'f1'" 900 96 true)"
explain "1d, all functions, sealed" stepgate_app "$(buckets NULL 900 96 true)"
explain "now and queue, one function" stepgate_app "$(query FunctionSeriesNow | sed -e "s/@tenant/'t1'/g; s/sqlc.narg(function)/'f1'/g")"
