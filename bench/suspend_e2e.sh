#!/bin/bash
# bench/suspend_e2e.sh BIN N: the end-to-end time, minus the sleep, of N sync runs of
# orders.checkout that suspend for a 100 ms sleep between steps (curl ?wait=30s, one at a
# time, after 10 unmeasured), on a private `stepgate dev`: p50 and p90 in ms.
# Alternate two builds: for r in 1 2; do bench/suspend_e2e.sh OLD 80; bench/suspend_e2e.sh NEW 80; done
bin=$1
n=$2
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
dir=$(mktemp -d); chmod 755 $dir; port=$((18700 + RANDOM % 200))
DATABASE_URL= $bin dev --addr 127.0.0.1:$port --dir $dir/state > $dir/out 2>$dir/err &
pid=$!
for i in $(seq 120); do grep -q STEPGATE_TOKEN $dir/out 2>/dev/null && break; sleep 1; done
tok=$(grep -o 'STEPGATE_TOKEN=[^ ]*' $dir/out | head -1 | cut -d= -f2)
for i in $(seq 10); do curl -s -o /dev/null -X POST "http://127.0.0.1:$port/v1/functions/orders.checkout/runs?wait=30s" -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' -d '{"item":"book","sleep_ms":100}'; done
for i in $(seq $n); do curl -s -o /dev/null -w '%{time_total}\n' -X POST "http://127.0.0.1:$port/v1/functions/orders.checkout/runs?wait=30s" -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' -d '{"item":"book","sleep_ms":100}'; done > $dir/t
kill $pid; wait $pid 2>/dev/null || true
python3 -c "
import statistics as s,sys
t=sorted(float(x)*1000-100 for x in open('$dir/t'))
print('$bin', 'n',len(t),'p50 %.2fms p90 %.2fms'%(s.median(t), t[int(len(t)*0.9)]))"
