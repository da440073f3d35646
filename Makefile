# Allot's developer entry points. `make test` is what CI runs (.ci/run).
GO        ?= go
PKGS      ?= ./...
TESTFLAGS ?= -race -timeout 9m

.PHONY: test bench lint generate tools

## test: every test, race detector on, against a throwaway redis-server.
test:
	./scripts/with-redis.sh $(GO) test $(TESTFLAGS) $(PKGS)

## bench: Go benchmarks of the hot paths, beside their baselines.
bench:
	./scripts/with-redis.sh $(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## lint: formatting and vet.
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
