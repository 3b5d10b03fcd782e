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
RACE_PKGS ?= ./dataplane/link/... ./dataplane/verbs/... ./dataplane/mr/...
FUZZTIME ?= 20s

.PHONY: all build demo test lint bench fuzz soak clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/softfabric ./cmd/softfabric
	$(GO) build ./...

# Until the AF_XDP data path lands, the demo is the transport engine moving
# ~100k mixed requests over the in-memory link with 10 % loss, reordering,
# duplication and corruption each way.
demo:
	$(GO) test -count=1 -run 'TestHostileNetwork$$' -v ./dataplane/engine

test: lint
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(GO) test -count=1 -race -short -timeout $(TEST_TIMEOUT) $(RACE_PKGS)

lint: $(STATICCHECK)
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

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
