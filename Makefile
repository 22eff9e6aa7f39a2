# Makefile: shortcuts; ./test.sh and the go commands below are the real thing.

GO ?= go

.PHONY: test dev generate build bench chaos soak scale release

## test: the whole suite (vet, generated-code and gofmt checks, go test -race); see test.sh
test:
	./test.sh

## chaos: the long fault suite (a few minutes): two real gateways on a real Postgres, under
## kill -9, SIGTERM, Postgres restarts, failovers (by hand and under Patroni: apt-get install -y
## patroni etcd-server, or those scenarios skip) and function faults, at the sizes of the crash-recovery
## issue, with the counts and recovery times printed (see chaos/doc.go). ./test.sh runs its
## short version. CHAOS_FLAGS adds go test flags, e.g. CHAOS_FLAGS=-run=TestChaos/FleetCrash.
chaos:
	STEPGATE_CHAOS=long $(GO) test ./chaos -count=1 -v -timeout 30m $(CHAOS_FLAGS)

## dev: gateway, dashboard and example functions on a private Postgres in ./.stepgate
dev:
	$(GO) run ./cmd/stepgate dev

## generate: regenerate protocol/ and gateway/api/server from openapi.yaml (and anything else with
## go:generate): in the Go SDK's modules first (protocol is one; ./... of the root does not reach
## them), then in the root module
SDK_MODULES = access protocol client functions
generate:
	for m in $(SDK_MODULES); do (cd $$m && $(GO) generate ./...) || exit 1; done
	$(GO) generate ./...

## build: bin/stepgate
build:
	$(GO) build -o bin/stepgate ./cmd/stepgate

## bench: latency and throughput of a running gateway: STEPGATE_URL (default
## http://127.0.0.1:8080, where `make dev` listens) with STEPGATE_TOKEN (the one `make dev`
## prints). Set DATABASE_URL to also measure the commit floor, and BENCH_FLAGS for more,
## e.g. make bench BENCH_FLAGS="--concurrency 1,16,64 --duration 30s".
bench:
	$(GO) run ./cmd/stepgate bench $(BENCH_FLAGS)

## soak: steady mixed load through two real gateways for DURATION (default 30m), with a
## kill -9 of one of them every 5 minutes, sampling memory, goroutines, files, connections,
## open runs and run latency; fails on growth that does not level off (see chaos/soak_test.go).
## ./test.sh runs a 20s version. SOAK_FLAGS adds go test flags.
DURATION ?= 30m
soak:
	STEPGATE_SOAK_DURATION=$(DURATION) $(GO) test ./chaos -run '^TestSoak$$' -count=1 -v -timeout 0 $(SOAK_FLAGS)

## scale: one gateway against two on one Postgres, SCALE_ROUNDS rounds in alternation (two
## `stepgate bench` processes each phase), with the runs per second and the CPU that each
## process used; it prints the ratio and asserts no timing (see chaos/scale_test.go).
SCALE_ROUNDS ?= 3
scale:
	STEPGATE_SCALE_ROUNDS=$(SCALE_ROUNDS) $(GO) test ./chaos -run '^TestScaleOut$$' -count=1 -v -timeout 60m $(SCALE_FLAGS)

## release: check that the tree is ready to be tagged (internal/helpers/version; versions agree, CHANGELOG.md,
## a clean tree, ./test.sh, go install from a proxy of HEAD, the npm packages), then print
## the tag and publish commands; see docs/releasing.md. RELEASE_FLAGS adds flags, e.g.
## RELEASE_FLAGS="-allow-dirty -skip-tests -skip-npm" to try it out.
release:
	$(GO) run ./internal/tooling/release $(RELEASE_FLAGS)
