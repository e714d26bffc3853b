# neuralisfs — see README.md. `make run` and `make test` are the two set-up
# commands; both install what is missing first (scripts/deps.sh).
GO      ?= go
BIN     := bin/neuralisfs
RUN_DIR := $(CURDIR)/.run
PKGS    := ./...

.PHONY: all build deps run test race gomaxprocs1 root-test bench fuzz lint ci clean

all: build

deps:
	@./scripts/deps.sh

build:
	$(GO) build -o $(BIN) ./cmd/neuralisfs

# Mount the example sources (example/) at .run/mnt in the foreground;
# Ctrl-C unmounts.
run: deps build
	@mkdir -p $(RUN_DIR)/mnt $(RUN_DIR)/state
	@sed "s|@EXAMPLE@|$(CURDIR)/example|g; s|@RUN@|$(RUN_DIR)|g" example/config.toml.in > $(RUN_DIR)/config.toml
	@echo "neuralisfs: mounting the example sources at $(RUN_DIR)/mnt (Ctrl-C unmounts)"
	$(BIN) mount -c $(RUN_DIR)/config.toml $(RUN_DIR)/mnt

# go vet, then every test with the race detector. FUSE tests need
# /dev/fuse and root; they skip without them unless CI=true.
test: deps
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	@./scripts/check-mounts.sh

race: test

# The same tests with one OS thread, where FUSE deadlocks show (go-fuse CI).
gomaxprocs1: deps
	GOMAXPROCS=1 $(GO) test -count=1 -timeout 30m $(PKGS)

bench: deps build
	./scripts/bench.sh

# Every fuzz target (func Fuzz* in a *_fuzz_test.go) for FUZZTIME in turn.
# make test runs only their seed corpora (testdata/fuzz/ in each package);
# an input that fails is written there too: fix the bug and commit it.
FUZZTIME ?= 30s
fuzz:
	@set -e; for f in $$(git ls-files '*_fuzz_test.go'); do \
		for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "== $$fn ./$$(dirname $$f) for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) ./$$(dirname $$f); \
		done; \
	done

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)
	$(GO) vet $(PKGS)

ci: lint test

clean:
	rm -rf bin $(RUN_DIR)
