# dynalimit — run `make help` for the targets.
SHELL := /bin/bash
GO    ?= go
BIN   ?= bin
GOLANGCI_LINT_VERSION := v2.15.0
FUZZTIME ?= 20s

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build the ratelimit binary into bin/
	$(GO) build -o $(BIN)/ratelimit ./cmd/ratelimit

.PHONY: run
run: ## run the service on the embedded store with the example config
	$(GO) run ./cmd/ratelimit serve -config_dir examples/config

.PHONY: test
# Test binaries run one at a time (-p 1): several of them start their own
# DynamoDB Local, and the timing-sensitive tests (over-admission, outages)
# must not share two cores with other JVMs.
test: ## run the whole test suite (starts DynamoDB Local itself)
	$(GO) vet ./...
	$(GO) test -race -count=1 -p 1 -timeout 30m ./...

.PHONY: bench
bench: ## run the Go benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: bench-grpc
bench-grpc: ## load-test the binary beside a trivial gRPC server with ghz (see BENCHMARKS.md)
	bash internal/bench/grpc.sh

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

.PHONY: lint
lint: ## go vet and golangci-lint (installed at the pinned version)
	$(GO) vet ./...
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

.PHONY: ci
ci: lint test ## everything CI checks
