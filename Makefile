# octofs build, test and tool targets. `make help` lists them.

GO       ?= go
GOFLAGS  ?=
BIN      := bin
PKGS     := ./...
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck
# Pinned so that every machine lints with the same rules.
STATICCHECK_VERSION := v0.8.2

.PHONY: all help build test test-short lint fmt vet staticcheck bench fuzz clean demo demo-stop crashtest fsx chaos verbs-build vm-test

all: build

help:
	@echo "make build       build bin/octofs and bin/octoctl"
	@echo "make demo        a local 3-node cluster mounted with FUSE: copy and verify a tree, show it, stop it"
	@echo "                 (DEMO_KEEP=1 leaves it running and mounted at /mnt/octofs; make demo-stop ends it)"
	@echo "make test        lint, then every test with -race (what CI runs)"
	@echo "make bench       benchmarks with baselines side by side"
	@echo "make crashtest   pmem power-loss harness, CRASHSTATES crash states (default 100000)"
	@echo "make fsx         data-path fsx against a model, FSXOPS operations (default 1000000), FSXSEED to replay"
	@echo "make bigdir      a BIGDIR-entry directory through the client library (default 1000000)"
	@echo "make killtest    SIGKILL a node at KILLPOINTS random points of cross-node metadata ops (default 500), KILLSEED to replay"
	@echo "make chaos       3 serve processes killed, stopped and restarted for CHAOSTIME (default 5m)"
	@echo "make fuzz        run every fuzz target for FUZZTIME each (default 10s)"
	@echo "make mutate      remove each pmem flush and fence in turn; fail unless the crash harness catches each"
	@echo "make lint        gofmt, go vet, staticcheck"
	@echo "make verbs-build vet, lint, build and unit-test the cgo verbs provider (part of make test)"
	@echo "make vm-test     Soft-RoCE QEMU cluster: verbs conformance, perftest, bench rdma (~4 min)"

build:
	$(GO) build $(GOFLAGS) -o $(BIN)/ ./cmd/octofs ./cmd/octoctl

test: lint verbs-build
	$(GO) test $(GOFLAGS) -race -timeout 15m $(PKGS)

# Quick local loop: no race detector, no lint.
test-short:
	$(GO) test $(GOFLAGS) -short $(PKGS)

lint: fmt vet staticcheck

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

$(STATICCHECK):
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) $(PKGS)

.PHONY: mutate
MUTATE_STATES ?= 6000
# Removes each flush, fence and persist call on pmem's production paths
# (found by parsing the package) and a few reorderings, one at a time,
# through go test -overlay (the tree is not modified), runs the crash
# tests and fails unless every mutation is caught; prints the table.
mutate:
	$(GO) run ./pmem/internal/mutate -states $(MUTATE_STATES)

FUZZTIME ?= 10s
# Every Fuzz* function, found by name, run for FUZZTIME.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# A local cluster on loopback, mounted with FUSE (scripts/demo.sh);
# DEMO_KEEP=1 leaves it running and mounted, make demo-stop ends it.
demo: build
	./scripts/demo.sh

demo-stop:
	./scripts/demo.sh stop

bench: build
	$(BIN)/octoctl bench rdma
	$(BIN)/octoctl bench rpc
	$(BIN)/octoctl bench pmem
	$(BIN)/octoctl bench meta
	$(BIN)/octoctl bench data
	@if [ "$$(id -u)" = 0 ] && [ -e /dev/fuse ]; then $(BIN)/octoctl bench fuse; \
	else echo "bench fuse: skipped (mounting needs root and /dev/fuse)"; fi

clean:
	rm -rf $(BIN)

FSXOPS ?= 1000000
FSXSEED ?= 0
# The data path's fsx at scale: random reads, writes, truncates and
# fallocates from three clients on a 3-node in-process cluster, checked
# against a model (make test runs 100,000 operations). A failure prints
# its seed: make fsx FSXSEED=<seed> replays it.
fsx:
	$(GO) test $(GOFLAGS) -count=1 -timeout 120m -run '^TestFSX$$' -v ./dataplane/dpclient/ \
	  -args -fsx.ops=$(FSXOPS) -fsx.seed=$(FSXSEED)

BIGDIR ?= 1000000
# The million-entry directory through the client library on a 3-node
# cluster over RDMA: create rates over the first and last 100,000 entries,
# each against a small control directory measured moments apart; random
# lookups in it against a small directory; readdir returns every entry
# once (make test runs 20,000 entries).
bigdir:
	$(GO) test $(GOFLAGS) -count=1 -timeout 120m -run '^TestBigDirectory$$' -v ./client/ \
	  -args -client.bigdir=$(BIGDIR)

KILLPOINTS ?= 500
KILLSEED ?= 0
# Kill tests: three octofs serve processes; a random node is SIGKILLed at
# KILLPOINTS random points of cross-node creates, renames, links, unlinks,
# mkdirs and rmdirs, restarted, and the namespace checked against the
# acknowledged operations (make test runs up to 200 within 5 minutes). A failure prints its seed:
# make killtest KILLSEED=<seed> replays the same choices (not the same timing).
killtest:
	$(GO) test $(GOFLAGS) -count=1 -timeout 180m -run '^TestKillNodes$$' -v ./client/ \
	  -args -client.killpoints=$(KILLPOINTS) -client.killseed=$(KILLSEED)

CRASHSTATES ?= 100000
# The pmem power-loss harness at scale: random workloads crashed at every
# fence, each crash image recovered, fsck'd and compared with the model
# (make test runs the same test with 12,000 states). Prints the count.
# Crash points are also after stores and at flushes and msyncs, workloads
# run one goroutine or several, recovery is crashed too, and so are Format
# and the deletion of a 262,144-block record. Prints the time and the
# seed: make crashtest CRASHSEED=<seed> replays a run.
CRASHSEED ?= 0
crashtest:
	@mkdir -p $(BIN); \
	$(GO) test $(GOFLAGS) -count=1 -timeout 60m -run '^(TestCrashRecovery|TestFormatCrash|TestDeleteLargeFileCrash)$$' -v ./pmem/ \
	  -args -pmem.crashstates=$(CRASHSTATES) -pmem.seed=$(CRASHSEED) > $(BIN)/crashtest.log 2>&1; status=$$?; \
	grep -E 'seed [0-9]|crash states|crash points|deleting a record|--- |^ok|^FAIL' $(BIN)/crashtest.log; \
	[ $$status -eq 0 ] || { echo "crashtest failed, full log in $(BIN)/crashtest.log"; }; exit $$status

CHAOSTIME ?= 5m
# The control plane under faults at length: three `octofs serve` processes
# whose leaders and followers are killed, stopped (SIGSTOP) and restarted
# while admin writes run (make test runs the same test for 40s).
chaos:
	$(GO) test $(GOFLAGS) -count=1 -timeout 60m -run '^TestChaos$$' -v ./cmd/octofs/ -args -chaos.duration=$(CHAOSTIME)

# The verbs provider (cgo over libibverbs) compiles only with -tags verbs.
# make test vets, lints, builds and unit-tests it wherever libibverbs'
# headers and cgo exist, so that it cannot rot; its conformance test skips
# without an RDMA device (make vm-test runs it on rxe).
VERBS_H := /usr/include/infiniband/verbs.h
verbs-build: $(STATICCHECK)
	@if [ ! -f $(VERBS_H) ]; then \
	  echo "verbs-build: skipped: no $(VERBS_H) (apt-get install libibverbs-dev)"; exit 0; fi; \
	if ! command -v "$$(CGO_ENABLED=1 $(GO) env CC)" >/dev/null; then \
	  echo "verbs-build: skipped: no C compiler for cgo"; exit 0; fi; \
	set -ex; export CGO_ENABLED=1; \
	$(GO) vet -tags verbs ./rdma/...; \
	$(STATICCHECK) -tags verbs ./rdma/...; \
	$(GO) build -tags verbs ./...; \
	$(GO) test -tags verbs -count=1 ./rdma/verbs/

# QEMU guests joined by a virtual link with Soft-RoCE (rxe): the verbs
# provider's conformance suite, perftest and octoctl bench rdma side by
# side (vmtest/). Not part of make test. VMTEST_FLAGS: e.g. -steps
# conformance, -vms 3, -keep, -exec vm2:dmesg.
VMTEST_FLAGS ?=
vm-test:
	@./vmtest/host-deps.sh
	@mkdir -p .work/vm
	$(GO) build -o .work/vm/vmtest ./vmtest
	@exec .work/vm/vmtest $(VMTEST_FLAGS)
