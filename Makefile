# Allot's developer entry points. `make test` is what CI runs (.ci/run).
GO        ?= go
PKGS      ?= ./...
# -p 3: bench's smoke run waits out its scenarios' durations for two
# minutes; two other packages use the cores meanwhile.
TESTFLAGS ?= -race -timeout 9m -p 3

.PHONY: test sim chaos bench lint generate tools

# The fleet and chaos tests measure what a fleet of nodes admits under load;
# they run on their own, after the others, one package at a time and without
# the race detector, whose slowdown (or each other's load) would be what they
# measure. `make test` runs the chaos suite's short version (about 40 s).
FLEET_PKGS ?= ./internal/fleet/... ./internal/chaos/...
FLEETFLAGS ?= -timeout 9m -p 1
# The simulator runs one goroutine per seed and shares nothing between
# seeds: the race detector would find nothing in it and cost it tenfold, so
# it runs without it, through the other stages at the idle scheduling
# class, on the CPU they leave (scripts/test-stages.sh).
# `make test` runs SIM_SEEDS of them; `make sim` as many as SEEDS says.
SIM_PKG   ?= ./internal/sim
SIM_SEEDS ?= 1000
SEEDS     ?= 100000
FROM      ?= 1

## test: go vet (the README's snippets included, internal/readme), then
## every test against a throwaway redis-server: the unit tests with the
## race detector on, then the fleet and the chaos tests, and beside them
## all, on the CPU they leave, the simulator's seeds.
test:
	$(GO) vet ./...
	GO='$(GO)' TESTFLAGS='$(TESTFLAGS)' SIM_PKG='$(SIM_PKG)' SIM_SEEDS='$(SIM_SEEDS)' \
		FLEETFLAGS='$(FLEETFLAGS)' FLEET_PKGS='$(FLEET_PKGS)' \
		UNIT_PKGS="$$($(GO) list $(PKGS) | grep -v -e /internal/fleet -e /internal/chaos -e '/internal/sim$$')" \
		./scripts/with-redis.sh ./scripts/test-stages.sh

## sim: the fleet simulator over SEEDS seeds from FROM (make sim SEEDS=100000):
## every bound checked at every step; a failing seed prints its account, and
## `go test ./internal/sim -run TestSeeds -args -seed N` replays it.
sim:
	$(GO) test -timeout 0 -run '^TestSeeds$$' -v $(SIM_PKG) -args -seeds $(SEEDS) -from $(FROM)

## chaos: the chaos suite in full (about three minutes): each fault under
## load, one line per scenario; its table goes to $(CHAOS_TABLE) and, when
## every scenario passed, into docs/testing.md's Chaos section.
CHAOS_TABLE ?= internal/chaos/results.md
chaos:
	./scripts/with-redis.sh env CHAOS=full CHAOS_TABLE=$(CURDIR)/$(CHAOS_TABLE) \
		$(GO) test -count=1 -v -timeout 15m -run '^TestChaos$$' ./internal/chaos/
	awk 'FNR == NR { table = table $$0 "\n"; next } \
		/<!-- chaos:end -->/ { printf "%s", table; skip = 0 } \
		!skip { print } \
		/<!-- chaos:begin -->/ { skip = 1 }' $(CHAOS_TABLE) docs/testing.md > docs/testing.md.chaos && mv docs/testing.md.chaos docs/testing.md

## bench: Go benchmarks of the hot paths, beside their baselines.
bench:
	./scripts/with-redis.sh $(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## lint: formatting and vet.
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)

## generate: protobuf and gRPC code, with the generator versions pinned in go.mod.
PROTOC ?= protoc
generate:
	@command -v $(PROTOC) >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler"; exit 1; }
	mkdir -p bin
	$(GO) build -o bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o bin/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
	$(PROTOC) -I api \
		--plugin=protoc-gen-go=bin/protoc-gen-go --go_out=api --go_opt=paths=source_relative \
		--plugin=protoc-gen-go-grpc=bin/protoc-gen-go-grpc --go-grpc_out=api --go-grpc_opt=paths=source_relative \
		api/allot/v1/allocator.proto api/allot/v1/admin.proto
