#!/usr/bin/env bash
# test.sh: the one command that runs stepgate's whole test suite, from a fresh clone.
#
#   ./test.sh                 vet, generated-code freshness, gofmt, then go test ./...,
#                             in the root module and in each of the Go SDK's modules,
#                             then the TypeScript SDK's tests (with Node 20 or later)
#                             and a lint of openapi.yaml by Redocly CLI (Node 20.19 or later)
#                             with staticcheck beside them
#   ./test.sh -run TestFoo    extra arguments go to `go test` (the TypeScript step is skipped)
#
# Postgres: the tests need a server (see internal/wiring/pgtest).
#   - STEPGATE_TEST_DATABASE_URL set (a superuser URL): used as is.
#   - else each test process starts a private server from the machine's Postgres
#     binaries (apt-get install -y postgresql); running as root needs the `postgres` OS
#     user, which that package creates.
#
# Race detector: on. It costs little here. Measured on the 2-core dev machine (Debian 12,
# Go 1.26, the shared Postgres on :5432, 10 test packages), wall clock:
#                     warm build cache   cold build cache (a fresh CI machine)
#   go test ./...     17-20s             57s
#   go test -race     21-37s             1m19s
# -race needs cgo (a C compiler); without one the tests run without it, with a warning.
# STEPGATE_TEST_RACE=0 turns it off.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'test.sh: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH (Go 1.26 is needed; /usr/local/go/bin?)"

# --- Postgres -------------------------------------------------------------------------

have_pg_binaries() {
	local dir
	if command -v pg_config >/dev/null 2>&1; then
		dir=$(pg_config --bindir 2>/dev/null || true)
		[[ -n $dir && -x $dir/postgres && -x $dir/initdb ]] && return 0
	fi
	for dir in /usr/lib/postgresql/*/bin; do
		[[ -x $dir/postgres && -x $dir/initdb ]] && return 0
	done
	return 1
}

need_private_servers() {
	have_pg_binaries || die "no Postgres binaries to start private test servers.
Install them (Debian/Ubuntu):   apt-get install -y postgresql
or point the tests at a server:  export STEPGATE_TEST_DATABASE_URL=postgres://USER@HOST:PORT/postgres  (a superuser)"
	if [[ $(id -u) == 0 ]] && ! id postgres >/dev/null 2>&1; then
		die "running as root, the private test servers run as the 'postgres' OS user, which does not exist (apt-get install -y postgresql creates it)"
	fi
}

if [[ -n ${STEPGATE_TEST_DATABASE_URL:-} ]]; then
	echo "test.sh: Postgres: STEPGATE_TEST_DATABASE_URL is set; using it"
else
	# Private servers by default, even when a server runs on 127.0.0.1:5432: each test
	# process gets its own (400 connections, nothing else on it), so the parallel
	# packages never compete for a shared server's max_connections (100 by default;
	# the gateway package alone peaks near 190) and leave nothing behind on it.
	# It costs ~5s in all. To use a server of your own:
	#   STEPGATE_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres ./test.sh
	unset STEPGATE_TEST_DATABASE_URL
	need_private_servers
	echo "test.sh: Postgres: each test process starts a private server"
fi

# --- Checks ---------------------------------------------------------------------------

# The Go SDK's modules: nested modules, each with its own go.mod, at the directories of
# their import paths (see docs/development.md). ./... in the root module does not reach
# them: each step below that runs the go command over ./... runs it in each of them too.
sdk_modules=(access protocol client functions)

step "go vet ./... (the root module, then ${sdk_modules[*]})"
go vet ./...
for m in "${sdk_modules[@]}"; do
	(cd "$m" && go vet ./...) || die "go vet in the SDK module $m failed (above)"
done

step "go.mod is tidy (go mod tidy -diff, in the root module and ${sdk_modules[*]})"
go mod tidy -diff || die "go.mod or go.sum is not tidy (diff above): run 'go mod tidy' and commit the result"
for m in "${sdk_modules[@]}"; do
	(cd "$m" && go mod tidy -diff) ||
		die "$m/go.mod or $m/go.sum is not tidy (diff above): run 'go mod tidy' in $m and commit the result"
done

step "generated code is fresh ((cd protocol && go generate ./...); go generate ./gateway/api/... ./journal)"
# Generate in place and compare with what was there before, in a git checkout or not,
# committed or not. When stale, put the old files back so that this script never
# changes the tree, and fail.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
generated=(protocol gateway/api journal/internal/dbsqlc)
for dir in "${generated[@]}"; do
	mkdir -p "$work/before/$(dirname "$dir")"
	cp -a "$dir" "$work/before/$dir"
done
restore_generated() {
	local dir f
	for dir in "${generated[@]}"; do
		while IFS= read -r f; do
			[[ -e $work/before/$f ]] || rm -f -- "$f"
		done < <(find "$dir" -type f)
		while IFS= read -r f; do
			cmp -s "$f" "${f#"$work/before/"}" || cp -p -- "$f" "${f#"$work/before/"}"
		done < <(find "$work/before/$dir" -type f)
	done
}
if ! { (cd protocol && go generate ./...) && go generate ./gateway/api/... ./journal; }; then
	restore_generated
	die "go generate in protocol, ./gateway/api/... or ./journal failed (above)"
fi
stale=
for dir in "${generated[@]}"; do
	diff -ru "$work/before/$dir" "$dir" >>"$work/diff" || stale=1
done
if [[ -n $stale ]]; then
	cat "$work/diff"
	restore_generated
	die "the generated code is stale (diff above): run '(cd protocol && go generate ./...) && go generate ./gateway/api/... ./journal' and commit the result"
fi

step "migrations/schema.sql is fresh (go generate ./migrations)"
# A private Postgres, migrated, then dumped by its own pg_dump: the file says which major
# version made it, and only a dump of that version is compared.
if have_pg_binaries && { [[ $(id -u) != 0 ]] || id postgres >/dev/null 2>&1; }; then
	go run ./migrations/internal/schemadump -o "$work/schema.sql" || die "dumping the migrated schema failed (above)"
	if [[ $(sed -n 2p migrations/schema.sql) != "$(sed -n 2p "$work/schema.sql")" ]]; then
		echo "test.sh: migrations/schema.sql was made by another pg_dump version than this machine's; not compared"
	else
		diff -u migrations/schema.sql "$work/schema.sql" ||
			die "migrations/schema.sql is stale (diff above): run 'go generate ./migrations' and commit the result"
	fi
else
	echo "test.sh: no Postgres binaries to dump the migrated schema with: migrations/schema.sql not compared"
fi

# The TypeScript SDK (sdk/typescript) needs Node 20 or later; without it its checks and
# tests are skipped with a message (the Go end-to-end test skips itself too).
ts_sdk=sdk/typescript
have_node20() {
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || return 1
	local v
	v=$(node --version 2>/dev/null) || return 1
	v=${v#v}
	((${v%%.*} >= 20))
}
if have_node20; then
	step "TypeScript SDK: npm ci, and its generated protocol types are fresh (openapi-typescript)"
	# One more try after a failure: the registry is a network away.
	(cd "$ts_sdk" && { npm ci --no-audit --no-fund --loglevel=error || npm ci --no-audit --no-fund --loglevel=error; }) ||
		die "npm ci in $ts_sdk failed (above)"
	(cd "$ts_sdk" && node_modules/.bin/openapi-typescript ../../openapi.yaml -o "$work/protocol.gen.ts" --silent) ||
		die "openapi-typescript failed (above)"
	diff -u "$ts_sdk/src/protocol.gen.ts" "$work/protocol.gen.ts" ||
		die "the TypeScript SDK's generated types are stale (diff above): run 'npm run generate' in $ts_sdk and commit the result"
else
	echo "test.sh: Node 20 or later with npm is not installed: the TypeScript SDK's checks and tests are skipped"
fi

# openapi.yaml, linted by a third-party linter as the users who feed it to their own
# generators would: Redocly CLI (from npm, pinned in internal/tooling/openapilint) with its
# recommended rules, each an error; what is right as it is is silenced, with its reason,
# in that directory's .redocly.lint-ignore.yaml. It needs Node 20.19 (or 22.12) or later.
openapilint=internal/tooling/openapilint
have_node_for_redocly() {
	have_node20 || return 1
	local v major minor
	v=$(node -p 'process.versions.node' 2>/dev/null) || return 1
	major=${v%%.*} minor=${v#*.} minor=${minor%%.*}
	((major > 22 || (major == 22 && minor >= 12) || (major == 20 && minor >= 19)))
}
if have_node_for_redocly; then
	step "openapi.yaml: Redocly CLI's lint (npm run lint in $openapilint)"
	(cd "$openapilint" && { npm ci --no-audit --no-fund --loglevel=error || npm ci --no-audit --no-fund --loglevel=error; }) ||
		die "npm ci in $openapilint failed (above)"
	(cd "$openapilint" && npm run lint --silent) ||
		die "Redocly CLI found problems in openapi.yaml (above): fix them, or silence one with its reason in $openapilint/.redocly.lint-ignore.yaml"
else
	echo "test.sh: Node 20.19 or later with npm is not installed: openapi.yaml is not linted by Redocly CLI"
fi

step "gofmt -l"
# The Go files that git tracks or would add (so not .stepgate/ and other ignored
# directories); outside git, those under . but not in dot-directories.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	mapfile -d '' gofiles < <(git ls-files -z --cached --others --exclude-standard -- '*.go')
else
	mapfile -d '' gofiles < <(find . -name '*.go' -not -path './.*' -print0)
fi
existing=()
for f in "${gofiles[@]}"; do [[ -f $f ]] && existing+=("$f"); done
unformatted=
((${#existing[@]} == 0)) || unformatted=$(gofmt -l "${existing[@]}")
[[ -z $unformatted ]] || die "these files need gofmt -w:"$'\n'"$unformatted"

# --- Tests ----------------------------------------------------------------------------

race=(-race)
if [[ ${STEPGATE_TEST_RACE:-1} == 0 ]]; then
	race=()
elif [[ $(go env CGO_ENABLED) != 1 ]]; then
	echo "test.sh: warning: cgo is off (no C compiler? apt-get install -y gcc): testing without -race" >&2
	race=()
fi

# The cost ledger (bench/ledger) counts allocations, which the race detector changes by
# chance: it runs in a step of its own, without it.
ledger=./bench/ledger
mapfile -t packages < <(go list ./... | grep -vx "github.com/stepgate/stepgate/bench/ledger")
# The timeout is per package: the gateway's took 712s of it in a CI clone on 2026-12-08
# (it was shorter a day before: see the closing note of that stop), so 25m leaves room.
step "go test ${race[*]} -count=1 -timeout 25m ./... (but $ledger)${*:+ $*}"
rc=0
# The TypeScript SDK's end-to-end test runs in its own step below.
STEPGATE_SKIP_TS_E2E=1 go test "${race[@]}" -count=1 -timeout 25m "${packages[@]}" "$@" || rc=$?

step "the cost ledger: go test -count=1 $ledger${*:+ $*}"
go test -count=1 -timeout 5m "$ledger" "$@" || rc=$?

# The SDK's modules, each in its own go test (a go test runs in one module). Their tests
# that need a whole gateway live in the root module (internal/sdke2e), tested above.
for m in "${sdk_modules[@]}"; do
	step "go test ${race[*]} -count=1 ./... in the SDK module $m${*:+ $*}"
	(cd "$m" && go test "${race[@]}" -count=1 -timeout 15m ./... "$@") || rc=$?
done

# staticcheck (a tool dependency in go.mod) runs beside the TypeScript SDK's steps, not
# beside the Go tests, whose longest package (gateway) sets the suite's time on 2 cores:
# its findings are printed, and fail the suite, at the end.
step "staticcheck ./... (in the background, in the root module and ${sdk_modules[*]}; its findings come at the end)"
# The SDK's modules do not have staticcheck as a tool: the root module's binary (go tool -n
# builds it and prints its path) checks them from their directories.
staticcheck_all() {
	local bin m status=0
	bin=$(go tool -n staticcheck) || return
	"$bin" ./... || status=1
	for m in "${sdk_modules[@]}"; do
		(cd "$m" && "$bin" ./...) || { echo "(the findings above are in $m/)"; status=1; }
	done
	return "$status"
}
staticcheck_all >"$work/staticcheck.log" 2>&1 &
staticcheck_pid=$!

# --- The TypeScript SDK ---------------------------------------------------------------
# Unit tests (tsc, then node --test), the end-to-end test on a real gateway (a Go test:
# stepgate dev with a private Postgres, the SDK's examples served by Node), and the Fetch
# handler on another runtime from npm (Bun, then Deno) when it installs. About 30s.
if (($# == 0)) && have_node20; then
	step "TypeScript SDK: unit tests (npm test: tsc, node --test)"
	(cd "$ts_sdk" && npm test --silent) || rc=1
	step "TypeScript SDK: the test harness under Vitest (npm run test:vitest)"
	(cd "$ts_sdk" && npm run test:vitest --silent) || rc=1
	step "TypeScript SDK: end-to-end (go test -run '^TestTypeScript(SDK|Client)$' ./cmd/stepgate)"
	go test -count=1 -run '^TestTypeScript(SDK|Client)$' ./cmd/stepgate || rc=1
	for runtime in bun@1.4.5 deno@2.9.6; do
		name=${runtime%@*}
		step "TypeScript SDK: the Fetch handler on $runtime (from npm)"
		if ! npm install --prefix "$work/$name" --no-audit --no-fund --loglevel=error "$runtime" >"$work/$name.log" 2>&1 ||
			! "$work/$name/node_modules/.bin/$name" --version >/dev/null 2>&1; then
			echo "test.sh: $runtime did not install from npm; skipped"
			continue
		fi
		case $name in
		bun) "$work/bun/node_modules/.bin/bun" "$ts_sdk/dist/test/runtime-smoke.js" || rc=1 ;;
		deno) "$work/deno/node_modules/.bin/deno" run --allow-net "$ts_sdk/dist/test/runtime-smoke.js" || rc=1 ;;
		esac
	done
fi

step "staticcheck ./...: its findings"
if wait "$staticcheck_pid"; then
	echo "none"
else
	cat "$work/staticcheck.log"
	echo "test.sh: staticcheck found the above: fix them (go tool staticcheck ./..., or \$(go tool -n staticcheck) ./... in an SDK module)" >&2
	rc=1
fi

# The dashboard's browser tests save screenshots; say where.
shopt -s nullglob
shots=(test-artifacts/*.png)
if ((${#shots[@]} > 0)); then
	step "screenshots (test artifacts)"
	for f in "${shots[@]}"; do echo "$PWD/$f"; done
fi
exit "$rc"
