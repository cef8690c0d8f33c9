# octofs build, test and tool targets. `make help` lists them.

GO       ?= go
GOFLAGS  ?=
BIN      := bin
PKGS     := ./...
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck
# Pinned so that every machine lints with the same rules.
STATICCHECK_VERSION := v0.8.2

.PHONY: all help build test test-short lint fmt vet staticcheck bench fuzz clean demo crashtest verbs-build vm-test

all: build

help:
	@echo "make build       build bin/octofs and bin/octoctl"
	@echo "make demo        start a local 3-node cluster, show it, stop it"
	@echo "make test        lint, then every test with -race (what CI runs)"
	@echo "make bench       benchmarks with baselines side by side"
	@echo "make crashtest   pmem power-loss harness, CRASHSTATES crash states (default 100000)"
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

# A local cluster on loopback (scripts/demo.sh); DEMO_KEEP=1 keeps it running.
demo: build
	./scripts/demo.sh

bench: build
	$(BIN)/octoctl bench rdma
	$(BIN)/octoctl bench pmem

clean:
	rm -rf $(BIN)

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
