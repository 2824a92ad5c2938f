# How the test stages build, so that they share one build instead of
# compiling the same crates again (sourced by redis/, postgres/ and
# serve/run-tests.sh; the Makefile's lint reads `server_features`).
#
# Cargo resolves dependencies' features from the packages, features and
# kind of command it is given: `cargo test -p ratomic-redis --features
# server-tests`, `cargo test -p ratomic-tower --features redis` and `cargo
# build -p ratomic-cli` each rebuilt tokio, syn, url and 20–40 other crates
# in a feature set of their own. Selecting the workspace's default members,
# as plain `cargo test` does, keeps every third-party crate as
# `make test-rust` built it.

# The server suites' features: one union for the Redis and PostgreSQL
# stages, which pick their suites by test-target name.
server_features=ratomic-redis/server-tests,ratomic-postgres/server-tests,ratomic-tower/redis,ratomic-tower/postgres

# The debug `ratomic` binary (target/debug/ratomic), as plain `cargo test`
# builds it: after `make test-rust` nothing is left to build (cargo links
# target/debug/ratomic to that build again). Even a target filter changes
# the resolution: `cargo test --no-run --test cli` built
# prost, tonic's stack and ratomic-serve in a feature set of their own
# (~70 s in the Redis stage); `--tests` selects as plain `cargo test` does.
build_debug_cli() {
    cargo test -q --no-run --tests
}
