#!/usr/bin/env bash
# bench/pair.sh: functions of one build against a base function, interleaved in one
# `stepgate dev`, so that a shared machine's drift moves both sides of each ratio alike.
#
#   go build -o /tmp/stepgate ./cmd/stepgate
#   bench/pair.sh /tmp/stepgate                      # hello.limited and hello.keyed vs hello
#   FNS=hello,orders.checkout,hello CONC=1 bench/pair.sh /tmp/stepgate
#
# FNS lists the cells in order (the first function is the base: each other cell is divided
# by the mean of the base cells around it); CONC the clients; DUR each cell's time.
set -euo pipefail
bin=$1
dir=$(mktemp -d)
chmod 755 "$dir" # the private Postgres runs as the postgres OS user when we are root
port=$((18200 + RANDOM % 500))
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
DATABASE_URL= "$bin" dev --addr "127.0.0.1:$port" --dir "$dir/state" >"$dir/out.txt" 2>"$dir/err.txt" &
pid=$!
for _ in $(seq 120); do grep -q STEPGATE_TOKEN "$dir/out.txt" 2>/dev/null && break; sleep 1; done
export "$(grep -o 'STEPGATE_TOKEN=[^ ]*' "$dir/out.txt" | head -1)"
fns=${FNS:-hello,hello.limited,hello.keyed,hello,hello.limited,hello.keyed,hello,hello.limited,hello.keyed,hello}
STEPGATE_URL="http://127.0.0.1:$port" "$bin" bench --functions "$fns" --concurrency "${CONC:-16}" \
	--duration "${DUR:-4s}" --json 2>/dev/null >"$dir/bench.json"
python3 - "$dir/bench.json" <<'PY'
import json, statistics, sys
cells = json.load(open(sys.argv[1]))["cells"]
base = cells[0]["function"]
ratios = {}
for i, c in enumerate(cells):
    print(f'{c["function"]:24} {c["runs_per_second"]:8.1f} runs/s  p50 {c["latency"]["p50_ms"]:7.2f}ms  p99 {c["latency"]["p99_ms"]:7.2f}ms  errors {c["errors"]}')
    if c["function"] == base:
        continue
    around = [x["runs_per_second"] for x in cells[:i] if x["function"] == base][-1:] + \
             [x["runs_per_second"] for x in cells[i:] if x["function"] == base][:1]
    ratios.setdefault(c["function"], []).append(c["runs_per_second"] / statistics.mean(around))
for f, r in ratios.items():
    print(f'{f} / {base}: ' + " ".join(f"{x:.2f}" for x in r) + f"  median {statistics.median(r):.2f}")
PY
