# Entry points of once. `make run` and `make test` work on a fresh Debian 12
# machine as root: each installs what is missing, builds and runs.

BUILD      ?= build
ASAN_BUILD ?= build/asan
FUZZ_BUILD ?= build/fuzz
PYTEST     := /usr/bin/python3 -m pytest
JOBS       ?= $(shell nproc)

.PHONY: all deps build build-asan run demo demo-ledger test unit integration fuzz bench bench-compare valgrind coverage chaos soak clean \
        install uninstall deb

all: build

deps:
	@bash scripts/deps

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DONCE_TESTS=OFF >/dev/null
	@ninja -C $(BUILD) -j $(JOBS)

build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DONCE_SANITIZE=ON -DONCE_WERROR=ON \
	  -DONCE_FAULT_INJECTION=ON >/dev/null
	@ninja -C $(ASAN_BUILD) -j $(JOBS)

# The gateway on SQLite with examples/once.ini, in front of a fake provider;
# EXAMPLE=approvals|keys|webhooks|mcp|mcp-stdio: examples/$(EXAMPLE).ini and
# the fakes it needs, for the walkthrough of its doc.
EXAMPLE    ?=
run: build
	@bash scripts/run $(BUILD) $(EXAMPLE)

# A simulated agent with retries and crashes against a fake provider, without
# once and through it: the duplicates each way, and what is left to a human.
demo: build
	@bash scripts/demo $(BUILD)

# A tour of the ledger through libonce and the CLI, without HTTP.
demo-ledger: build
	@bash scripts/demo-ledger $(BUILD)

test: build-asan
	@bash scripts/deps --test
	@bash scripts/test $(ASAN_BUILD)

unit: build-asan
	@cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS)

integration: build-asan
	@ONCE_BIN=$(ASAN_BUILD)/once ONCE_LEDGER_TOOL=$(ASAN_BUILD)/ledger_tool $(PYTEST) -q tests/integration

fuzz: deps
	@CC=clang cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DONCE_FUZZ=ON -DONCE_TESTS=OFF -DONCE_SANITIZE=ON >/dev/null
	@ninja -C $(FUZZ_BUILD) -j $(JOBS)
	@bash scripts/fuzz $(FUZZ_BUILD) $${FUZZ_SECONDS:-60}

# Benchmarks print figures and ratios against baselines run side by side;
# they are never tests. The proxy benchmark needs wrk and nginx.
bench: build
	@bash scripts/deps --bench
	@bash bench/run.sh $(BUILD)
	@bash bench/proxy.sh $(BUILD)
	@bash bench/hooks.sh $(BUILD)
	@bash bench/pg.sh $(BUILD)
	@/usr/bin/python3 bench/stream.py $(BUILD)
	@cd tests/clients && npm ci --no-audit --no-fund >/dev/null
	@bash bench/mcp.sh $(BUILD)

# once beside the idempotency middlewares users would pick instead (bench/peers,
# installed from the npm lockfile), nginx and once on PostgreSQL, in one run:
# a table, bench/results/compare.csv and the charts of docs/benchmarks.md.
bench-compare: build
	@bash scripts/deps --compare
	@node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' || \
	  { echo "bench-compare: Node.js >= 20 is needed (the peers' Redis client); this one is $$(node --version)" >&2; exit 1; }
	@cd bench/peers && npm ci --no-audit --no-fund --loglevel=error
	@/usr/bin/python3 bench/compare.py $(BUILD)
	@bash bench/plot_compare.sh

valgrind: build
	@bash scripts/valgrind $(BUILD)

# Line coverage of src/ per folder (gcov/lcov), from the unit, integration
# and security tests.
coverage: deps
	@bash scripts/deps --coverage
	@bash scripts/coverage build/cov

# The chaos suite: SIGKILLs at every phase (a fault-injection build in build/fault),
# storms, infrastructure faults, on SQLite and PostgreSQL; a table at the end
# (build/chaos-results.txt). `bash scripts/chaos --ci` runs the fixed CI subset.
chaos: build-asan
	@bash scripts/chaos

# A randomised soak with random SIGKILLs of gateway nodes: make soak DURATION=120
soak:
	@bash scripts/soak $${DURATION:-60}

# The binary, libonce.so with its soname link, include/once, once.pc, the man
# pages, the examples and once.service under PREFIX, staged under DESTDIR
# when it is set (docs/install.md). `make uninstall` removes what the last
# install wrote (build/install_manifest.txt).
PREFIX     ?= /usr/local
install: build
	@cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	@ninja -C $(BUILD) -j $(JOBS)
	@DESTDIR=$(DESTDIR) cmake --install $(BUILD)

uninstall:
	@test -f $(BUILD)/install_manifest.txt || { echo "make uninstall: no $(BUILD)/install_manifest.txt (nothing installed from this tree)" >&2; exit 1; }
	@while IFS= read -r f || [ -n "$$f" ]; do rm -f "$(DESTDIR)$$f"; done < $(BUILD)/install_manifest.txt
	@rm -f $(BUILD)/install_manifest.txt

# The Debian package (debian/), built with dpkg-buildpackage; the .deb and
# its companions land in build/deb (scripts/deb).
deb: deps
	@bash scripts/deps --deb
	@bash scripts/deb

clean:
	rm -rf build
