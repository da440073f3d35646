# Allot's developer entry points. `make test` is what CI runs (.ci/run).
GO        ?= go
PKGS      ?= ./...
TESTFLAGS ?= -race -timeout 9m

.PHONY: test bench lint generate tools

# The fleet tests measure what a fleet of nodes admits under load; they run
# on their own, after the others and without the race detector, whose
# slowdown would be what they measure.
FLEET_PKGS ?= ./internal/fleet/...
FLEETFLAGS ?= -timeout 9m

## test: every test against a throwaway redis-server: the race detector on,
## then the fleet tests.
test:
	./scripts/with-redis.sh sh -c '$(GO) test $(TESTFLAGS) $$($(GO) list $(PKGS) | grep -v /internal/fleet) && $(GO) test $(FLEETFLAGS) $(FLEET_PKGS)'

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
		api/allot/v1/allocator.proto
