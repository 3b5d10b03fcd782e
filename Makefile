# softfabric build, test and lint entry points. `make test` is what CI runs.

SHELL := /bin/bash
GO ?= go
# staticcheck 2026.2.2, the newest release, built and checked with Go 1.26.
STATICCHECK_VERSION ?= v0.8.2
TOOLS := $(CURDIR)/.tools
STATICCHECK := $(TOOLS)/staticcheck-$(STATICCHECK_VERSION)/staticcheck
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
TEST_TIMEOUT ?= 10m
# Packages with goroutines of their own are also tested under -race (with
# -short, which trims statistical tests). The race detector costs 5-10x, so
# pure state machines stay out.
RACE_PKGS ?= ./fabric/... ./dataplane/link/... ./dataplane/verbs/... ./dataplane/mr/... ./dataplane/handoff/... ./dataplane/engine/... ./device/...
FUZZTIME ?= 20s

.PHONY: all build demo demo-transport bench-e2e bench-scale interop test lint bench fuzz soak clean generate check-generate

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/softfabric ./cmd/softfabric
	$(GO) build ./...

# Two namespaces, `softfabric up` in each, a ping-pong and a bandwidth run
# next to the raw AF_XDP and UDP baselines, then `down` and clean-up (root).
demo: build
	bash scripts/demo.sh

# The transport alone under a hostile in-memory network (10 % loss, reordering,
# duplication, corruption each way), ~100k mixed requests, with its counters.
demo-transport:
	$(GO) test -count=1 -run 'TestHostileNetwork$$' -v ./dataplane/engine

# softfabric perf between namespaces next to raw AF_XDP and UDP baselines
# (root); appends to BENCHMARKS.md.
bench-e2e: build
	bash scripts/bench-e2e.sh

# Scaling over queues and cores (root; no ip(8) needed): two namespaces on a
# veth with Q queues, a worker per queue at each end, RDMA writes over Q and
# 4Q queue pairs next to raw AF_XDP on the same Q, for Q = 1, 2, 4, ... up
# to half the CPUs. SCALE_QUEUES=1,2,4, SCALE_DURATION=3s and SCALE_REPEAT=3
# (the median of 3 runs) override.
# In process against through the daemon, side by side (make bench-e2e runs it too).
bench-daemon: build
	SOFTFABRIC_BIN=$(CURDIR)/bin/softfabric SOFTFABRIC_SCALE_DURATION=$(SCALE_DURATION) SOFTFABRIC_SCALE_REPEAT=$(SCALE_REPEAT) \
		$(GO) test -count=1 -run '^$$' -bench '^BenchmarkDaemon$$' -benchtime 1x -timeout 30m ./test/scale

bench-scale: build
	SOFTFABRIC_BIN=$(CURDIR)/bin/softfabric SOFTFABRIC_SCALE_QUEUES=$(SCALE_QUEUES) SOFTFABRIC_SCALE_DURATION=$(SCALE_DURATION) SOFTFABRIC_SCALE_REPEAT=$(SCALE_REPEAT) \
		$(GO) test -count=1 -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 30m ./test/scale

# softfabric against Linux Soft-RoCE (rxe) in a QEMU guest: ibv_rc_pingpong both ways and
# perftest's ib_write_bw/ib_send_bw/ib_read_bw servers, clean and with 5 % loss; a PASS/FAIL
# table, logs under $LAB_BUILD (default /tmp/rxelab). Root; not part of `test`.
interop: build
	bash test/interop/run.sh

test: lint check-generate
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(GO) test -count=1 -race -short -timeout $(TEST_TIMEOUT) $(RACE_PKGS)

lint: $(STATICCHECK)
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# BPF objects: bpf2go compiles bpf/**/*.c with clang and writes the
# committed *_bpfel.go and *_bpfel.o beside them. The toolchain (clang,
# llvm-strip from llvm, libbpf's bpf_helpers.h) comes from apt when missing.
# The committed objects are built with Debian 12's clang 14.0.6; another
# clang builds working but different bytes, which check-generate reports.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

generate:
	@if ! command -v clang >/dev/null || ! command -v llvm-strip >/dev/null || [ ! -e /usr/include/bpf/bpf_helpers.h ]; then \
		echo "installing clang, llvm and libbpf-dev"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends clang llvm libbpf-dev; \
	fi
	$(GO) generate ./bpf/...

# Regenerates into a scratch copy (go.mod, go.sum, bpf/) and fails when a
# committed *_bpfel.o or *_bpfel.go differs from what the sources build,
# or one is missing or left over. The comparison is byte for byte: bpf2go
# passes -fno-ident and -fdebug-prefix-map and strips DWARF, so the output
# holds no path, timestamp or compiler version and the same clang builds
# the same bytes in any directory, run after run. On a mismatch it prints
# the disassembly diff, which tells code changes from BTF-only ones.
check-generate:
	@set -eo pipefail; \
	command -v clang >/dev/null || { echo "check-generate: no clang; run make generate"; exit 1; }; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cp go.mod go.sum "$$tmp"/; cp -R bpf "$$tmp"/; \
	find "$$tmp/bpf" -name '*_bpfel.o' -delete -o -name '*_bpfel.go' -delete; \
	(cd "$$tmp" && $(GO) generate ./bpf/...); \
	list() { (cd "$$1" && find . \( -name '*_bpfel.o' -o -name '*_bpfel.go' \) | sed 's|^\./||' | sort); }; \
	status=0; \
	if ! diff <(list bpf) <(list "$$tmp/bpf"); then echo "check-generate: generated file set differs (<: committed, >: generated)"; status=1; fi; \
	for f in $$(list "$$tmp/bpf"); do \
		[ -e "bpf/$$f" ] || continue; \
		if ! cmp -s "bpf/$$f" "$$tmp/bpf/$$f"; then \
			echo "check-generate: bpf/$$f is stale"; status=1; \
			case "$$f" in *.o) diff <(llvm-objdump -d --no-show-raw-insn "bpf/$$f" | tail -n +3) \
				<(llvm-objdump -d --no-show-raw-insn "$$tmp/bpf/$$f" | tail -n +3) | head -40 || true;; esac; \
		fi; \
	done; \
	if [ $$status -ne 0 ]; then echo "check-generate: run make generate with $$(clang --version | head -1) and commit the result"; exit 1; fi; \
	echo "check-generate: bpf objects up to date ($$(clang --version | head -1))"

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./dataplane/...

# Every Fuzz* target in the module, FUZZTIME each. `go test -list` prints a
# package's matching names and then its "ok <pkg>" line.
fuzz:
	@set -eo pipefail; \
	targets=$$($(GO) test -list '^Fuzz' ./... | awk '/^Fuzz/ { n[++k] = $$1 } /^ok / { for (i = 1; i <= k; i++) print $$2 " " n[i]; k = 0 }'); \
	if [ -z "$$targets" ]; then echo "no fuzz targets"; exit 0; fi; \
	echo "$$targets" | while read -r pkg name; do \
		echo "== $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg" </dev/null; \
	done

soak:
	SOFTFABRIC_SOAK=1 $(GO) test -run TestSoak -count=1 -timeout 0 ./dataplane/...

clean:
	rm -rf bin .tools
