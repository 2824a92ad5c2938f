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

# The debug `ratomic` binary (target/debug/ratomic), built as `cargo test`
# builds it for the CLI's own tests.
build_debug_cli() {
    cargo test -q --no-run --test cli
}
