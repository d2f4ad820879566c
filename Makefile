# cann-train — see README.md. `make run` is the quickstart, `make test` is CI.
GO      ?= go
BIN     ?= bin/cann-train
# Packages that embed the Temporal server build slowly under -race; they run
# without it (everything concurrent of ours is in the race-tested set).
SERVER_PKGS := ./dev/... ./cmd/...
# Packages without concurrency of their own (no goroutine, lock or channel
# outside tests) run without -race too: it only slowed them (strategy 36 s
# under -race, 5 s without).
NORACE_PKGS := ./engine/strategy/...
RACE_PKGS    = $(shell $(GO) list ./... | grep -v -e '/dev' -e '/cmd/' -e '/engine/strategy')

.PHONY: all build run test test-race test-e2e vet lint fmt-check bench bench-mpi soak calibrate record-histories clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/cann-train

## run: the quickstart — embedded Temporal + Web UI, 3 node-worker processes, one real run.
run: build
	./$(BIN) quickstart --nodes 3 --steps 1000

## test: what CI runs (`.ci/run`): format, vet, race-tested units, then the
## end-to-end tests on a real embedded Temporal server with worker processes.
test: fmt-check vet lint test-race test-e2e

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags 'soak calibration record' ./cmd/cann-train ./engine/strategy ./workflows

test-race:
	$(GO) test -race -count=1 -timeout 10m $(RACE_PKGS)

test-e2e:
	$(GO) test -count=1 -timeout 20m $(SERVER_PKGS) $(NORACE_PKGS)

## bench: benchmarks (not in CI).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./engine/... ./ascend/...

clean:
	rm -rf bin

## lint: staticcheck (pinned), as CI runs it.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) run $(STATICCHECK) ./...

## soak: ≥ 20 random node kills and one Temporal server restart in one run (not in CI).
soak:
	$(GO) test -tags soak -count=1 -timeout 40m -v -run TestSoak ./cmd/cann-train

## record-histories: stage the scripted scenarios (workflows/record_test.go) on the embedded server and write their histories to RECORD_DIR, for the replay test (not in CI).
RECORD_DIR ?= $(CURDIR)/bin/histories
record-histories:
	mkdir -p $(RECORD_DIR)
	CANN_TRAIN_RECORD_SCRIPTED=$(RECORD_DIR) $(GO) test -tags record -count=1 -timeout 30m -v -run 'TestRecordScripted' ./workflows

## calibrate: the strategy planner against issue 5's acceptance thresholds (not yet all met).
calibrate:
	$(GO) test -tags calibration -count=1 -v -run 'TestCalibration' ./engine/strategy

## bench-mpi: ours vs Open MPI side by side, allreduce (COLLS="allgather broadcast ..." for others; NPS, TRANSPORTS, REPS, DTYPE=double|int32 narrow or widen it; installs openmpi-bin + libopenmpi-dev if missing).
bench-mpi: build
	@command -v mpicc >/dev/null || (apt-get update -qq && apt-get install -y -qq openmpi-bin libopenmpi-dev)
	mpicc -O3 -o bin/mpi_coll dev/mpibench/collectives.c
	dev/mpibench/compare.sh
