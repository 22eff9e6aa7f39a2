#!/bin/bash
# walper.sh BIN FN: WAL bytes and Postgres CPU per run of FN at 4 clients for 8 s on a fresh dev stack
BIN=$1; FN=$2
d=$(mktemp -d); chmod 755 $d; port=$((18600 + RANDOM % 300))
DATABASE_URL= STEPGATE_PPROF_ADDR= $BIN dev --addr 127.0.0.1:$port --dir $d/state >$d/out.txt 2>$d/err.txt &
pid=$!
for _ in $(seq 120); do grep -q STEPGATE_TOKEN $d/out.txt 2>/dev/null && break; sleep 1; done
export $(grep -o 'STEPGATE_TOKEN=[^ ]*' $d/out.txt | head -1)
P="psql -qAt -h $d/state/pg -U postgres -d stepgate"
STEPGATE_URL=http://127.0.0.1:$port $BIN bench --functions $FN --concurrency 4 --duration 3s --sleep 0 >/dev/null 2>&1
pm=$(head -1 $d/state/pg/data/postmaster.pid)
cpu() { local s=0; for p in $pm $(pgrep -P $pm); do v=$(awk '{print $14+$15+$16+$17}' /proc/$p/stat 2>/dev/null); s=$((s+${v:-0})); done; echo $s; }
l0=$($P -c "select pg_current_wal_lsn()"); n0=$($P -c "select count(*) from stepgate.run"); c0=$(cpu)
STEPGATE_URL=http://127.0.0.1:$port $BIN bench --functions $FN --concurrency 4 --duration 8s --sleep 0 >/dev/null 2>&1
l1=$($P -c "select pg_current_wal_lsn()"); n1=$($P -c "select count(*) from stepgate.run"); c1=$(cpu)
w=$($P -c "select pg_wal_lsn_diff('$l1','$l0')")
python3 -c "n=$n1-$n0; print(f'$FN runs {n}  WAL/run {$w/n:.0f} B  PG CPU/run {($c1-$c0)*10/n:.2f} ms')"
kill $pid; wait $pid 2>/dev/null; rm -rf $d
