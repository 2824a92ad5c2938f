#!/usr/bin/env bash
# BENCHMARKS.md's PostgreSQL table: starts a throwaway cluster (postgres/server.sh:
# loopback, fsync off) and runs postgres/examples/pg_bench_vs_raw.rs three times.
#   bash postgres/bench.sh [rounds] [seconds]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/.."
# shellcheck source=postgres/server.sh
source "$here/server.sh"
trap pg_stop_all EXIT
pg_install
pg_start "$(pg_free_port)"
"$pg_bin/postgres" --version
cargo build -q --release -p ratomic-postgres --example pg_bench_vs_raw
for run in 1 2 3; do
    echo "run $run:"
    cargo run -q --release -p ratomic-postgres --example pg_bench_vs_raw -- "$PG_URL" "${1:-3}" "${2:-1}"
done
# rate-limiter-flexible's RateLimiterPostgres from Node, beside ratomic/postgres
# (needs bindings-node built: npm ci && npm run build in bindings-node).
if [[ -d bindings-node/node_modules/rate-limiter-flexible ]] && ls bindings-node/ratomic.*.node >/dev/null 2>&1; then
    for run in 1 2 3; do
        echo "node run $run:"
        RATOMIC_POSTGRES_URL=$PG_URL node bindings-node/benchmark/postgres.js "${1:-3}" "${2:-1}"
    done
else
    echo "bindings-node is not built: skipping the rate-limiter-flexible comparison"
fi
