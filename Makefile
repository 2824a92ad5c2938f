# ratomic: one command builds everything and runs every test.
#
#   make test          # what CI runs (.ci/run): everything below
#   make test-rust     # workspace tests, doc tests, property tests, stress tests (release);
#                      # the published crates package and build from their packaged sources
#   make test-loom     # loom models of every CAS protocol
#   make test-ffi      # the C ABI: header drift, C/C++ tests under ASan+UBSan and valgrind, install
#   make test-python   # the Python package: fresh venv, wheel, pytest, stubtest
#   make test-node     # the Node addon: npm ci, build, typings drift, node --test, tsc
#   make test-redis    # ratomic-redis against real redis-servers (installed with apt if missing)
#   make test-serve    # `ratomic serve` driven by Python grpcio with Envoy's protos (own venv), on memory, a shared file and real redis-servers
#   make test-postgres # ratomic-postgres against a throwaway PostgreSQL cluster (apt if missing)
#   make lint          # rustfmt, clippy (every target: the benches and bench binaries build) and
#                      # rustdoc, warnings as errors
#   make lint-release  # the release workflow against GitHub's workflow schema
#
# Bounded settings keep the tests' own run short (CI took 34-44 minutes from a
# clean clone on 2 cores, most of it compiling; the README says how it was
# measured); raise them by hand for deeper runs, e.g.
#   make test-loom LOOM_MAX_PREEMPTIONS=3
#   make test-rust PROPTEST_CASES=20000 RATOMIC_STRESS_SCALE=20

CARGO ?= cargo
LOOM_MAX_PREEMPTIONS ?= 2
PROPTEST_CASES ?= 256
export PROPTEST_CASES

.PHONY: test test-rust test-loom test-ffi test-python test-node test-redis test-postgres test-serve lint lint-release

test: lint lint-release test-rust test-loom test-ffi test-python test-node test-redis test-postgres test-serve

test-rust:
	@# `cargo package` verifies each crate against the ones it has just packed (a
	@# registry overlay in target/package), but a registry version being
	@# immutable, it reuses what an earlier run left: the extraction under
	@# $$CARGO_HOME/registry/src/<overlay>/<name>-<version>/ and the build of it
	@# in the target directory. ratomic-tower would then be checked against an
	@# old ratomic. Remove both for our crates first. This runs before the
	@# debug builds: the fingerprints removed include the workspace crates',
	@# which every later debug build (the server stages') would then rebuild.
	rm -rf "$${CARGO_HOME:-$$HOME/.cargo}"/registry/src/*/ratomic-[0-9]* \
		"$${CARGO_HOME:-$$HOME/.cargo}"/registry/src/*/ratomic-redis-[0-9]* \
		"$${CARGO_HOME:-$$HOME/.cargo}"/registry/src/*/ratomic-postgres-[0-9]* \
		"$${CARGO_HOME:-$$HOME/.cargo}"/registry/src/*/ratomic-tower-[0-9]* \
		"$${CARGO_TARGET_DIR:-target}"/debug/.fingerprint/ratomic-*
	$(CARGO) package -q -p ratomic -p ratomic-redis -p ratomic-postgres -p ratomic-tower --allow-dirty
	$(CARGO) test
	$(CARGO) test -p ratomic --release --test stress

test-loom:
	RUSTFLAGS="--cfg ratomic_loom" LOOM_MAX_PREEMPTIONS=$(LOOM_MAX_PREEMPTIONS) CARGO_TARGET_DIR=target/loom \
		$(CARGO) test -p ratomic --release --test loom

test-ffi:
	bash ffi-c/run-tests.sh

test-python:
	bash bindings-python/run-tests.sh

test-node:
	bash bindings-node/run-tests.sh

test-redis:
	bash redis/run-tests.sh

test-postgres:
	bash postgres/run-tests.sh

test-serve:
	bash serve/run-tests.sh

# One clippy run and one rustdoc run over everything, the optional
# features included (the Redis server tests, the tower layer's Redis
# support): each extra invocation with other features re-checked the crates
# whose features changed, and each `cargo doc -p` its dependencies. The
# server suites build with the same union (scripts/test-builds.sh).
LINT_FEATURES := $(shell sed -n 's/^server_features=//p' scripts/test-builds.sh)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --features $(LINT_FEATURES) -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps -p ratomic -p ratomic-redis -p ratomic-postgres -p ratomic-tower --features ratomic-tower/redis,ratomic-tower/postgres

lint-release:
	bash scripts/check-release.sh
