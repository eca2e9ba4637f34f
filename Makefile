# kvroute: one binary, every subcommand under cmd/kvroute.
GO       ?= go
BIN      ?= bin/kvroute
PKGS     ?= ./...
# Tests run with the race detector; keep the whole run well under CI's limit on 2 cores.
TESTFLAGS ?= -race -count=1 -timeout 25m
BENCHTIME ?= 1s
FUZZTIME  ?= 20s

.PHONY: all deps node-deps python-deps build run test vet bench fuzz soak clean

all: build

deps:
	@bash scripts/deps.sh

# The commit is stamped at link time (kvroute version), so builds without Go's VCS stamping say it too.
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -modified)
build: deps
	$(GO) build -ldflags "-X main.buildCommit=$(COMMIT)" -o $(BIN) ./cmd/kvroute

# The one-command demo: the frontend on :8000 with simulated workers in-process.
run: build
	./$(BIN) serve

vet: deps
	$(GO) vet $(PKGS)

# The official openai npm client, pinned by its package-lock.json, for cmd/kvroute TestOpenAINodeClient
# (skipped when node is not installed).
OPENAI_NODE ?= cmd/kvroute/testdata/openai-node
node-deps:
	@if command -v npm >/dev/null 2>&1; then npm ci --no-audit --no-fund --prefix $(OPENAI_NODE); \
	else echo "node-deps: npm not found, the openai npm client acceptance test will be skipped"; fi

# The Python reference reader of the mm_kwargs descriptor (scripts/mm_kwargs_reader.py) verifies
# checksums with the xxhash module; transfer TestPythonReader runs it with the system python3. Debian
# package only (no PyPI); skipped when apt-get is missing or the module is already there.
python-deps:
	@if /usr/bin/python3 -c 'import xxhash' 2>/dev/null; then :; \
	elif command -v apt-get >/dev/null 2>&1; then apt-get install -y python3-xxhash >/dev/null || \
		echo "python-deps: could not install python3-xxhash, transfer TestPythonReader will be skipped"; \
	else echo "python-deps: apt-get not found, transfer TestPythonReader will be skipped"; fi

test: deps node-deps python-deps
	$(GO) vet $(PKGS)
	$(GO) test $(TESTFLAGS) $(PKGS)

# The benchmark suite, short (under 10 minutes on 2 cores): the benchmarks beside the code at BENCH_TIME
# each, then short runs of every `kvroute bench` subcommand, each writing report.json, report.md and SVG
# plots under BENCH_OUT. Figures are copied into docs/benchmarks.md by hand with the command. The trace
# benches are skipped when BENCH_TRACE is missing. Full runs: see docs/benchmarks.md "Benchmark suite".
BENCH_TIME  ?= 100ms
BENCH_OUT   ?= out/bench
BENCH_TRACE ?= testdata/traces/conversation-sample.jsonl
bench: build
	@mkdir -p $(BENCH_OUT)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCH_TIME) -short $(PKGS) > $(BENCH_OUT)/gotest.txt 2>&1; \
		s=$$?; cat $(BENCH_OUT)/gotest.txt; exit $$s
	./$(BIN) bench tokenizer --cold-runs 1 --warm-runs 3 --out $(BENCH_OUT)/tokenizer
	./$(BIN) bench route --workers 16,256,1024 --prompt-tokens 1024,8192 --indexed-blocks 64k,1M --decisions 1000 --out $(BENCH_OUT)/route
	@if [ -f "$(BENCH_TRACE)" ]; then \
		set -e; \
		./$(BIN) bench indexer --trace "$(BENCH_TRACE)" --workers 1000 --sweep --sweep-max 8s --sweep-min 250ms --sweep-steps 4 --out $(BENCH_OUT)/indexer; \
		./$(BIN) bench oracle --trace "$(BENCH_TRACE)" --minutes 10 --workers 8,16 --out $(BENCH_OUT)/oracle; \
		./$(BIN) bench e2e --trace "$(BENCH_TRACE)" --minutes 2 --max-requests 120 --workers 4 --modes kv,round-robin,least-loaded,llmd --arrival-speedup 20 --speedup-ratio 4 --out $(BENCH_OUT)/e2e; \
	else echo "bench: $(BENCH_TRACE) not found, trace benches skipped (set BENCH_TRACE)"; fi

fuzz: deps
	@bash scripts/fuzz.sh $(FUZZTIME)

# Soak: bench/soak runs load against the in-process `kvroute serve` stack for SOAK_DURATION (alone, so
# that its req/s, RSS and goroutine figures are its own; other SOAK_* knobs in bench/soak/doc.go), then
# every test under the soak tag (the long fault suite among them).
SOAK_DURATION ?= 60s
soak: deps
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -tags soak -count=1 -timeout 60m -run '^TestSoak$$' -v ./bench/soak
	$(GO) test -tags soak -count=1 -timeout 60m -skip '^TestSoak$$' $(PKGS)

clean:
	rm -rf bin
