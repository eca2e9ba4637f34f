# kvroute: one binary, every subcommand under cmd/kvroute.
GO       ?= go
BIN      ?= bin/kvroute
PKGS     ?= ./...
# Tests run with the race detector; keep the whole run well under CI's limit on 2 cores.
TESTFLAGS ?= -race -count=1 -timeout 25m
BENCHTIME ?= 1s
FUZZTIME  ?= 20s

.PHONY: all deps build run test vet bench fuzz soak clean

all: build

deps:
	@bash scripts/deps.sh

build: deps
	$(GO) build -o $(BIN) ./cmd/kvroute

# The one-command demo: the frontend on :8000 with simulated workers in-process.
run: build
	./$(BIN) serve

vet: deps
	$(GO) vet $(PKGS)

test: deps
	$(GO) vet $(PKGS)
	$(GO) test $(TESTFLAGS) $(PKGS)

# Benchmarks beside the code; figures are copied into docs/benchmarks.md by hand with the command.
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

fuzz: deps
	@bash scripts/fuzz.sh $(FUZZTIME)

soak: deps
	$(GO) test -tags soak -count=1 -timeout 60m $(PKGS)

clean:
	rm -rf bin
