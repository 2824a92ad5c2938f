#!/usr/bin/env bash
# BENCHMARKS.md's PostgreSQL table: starts a throwaway cluster (postgres/server.sh:
# loopback, fsync off) and runs postgres/examples/bench_vs_raw.rs three times.
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
cargo build -q --release -p ratomic-postgres --example bench_vs_raw
for run in 1 2 3; do
    echo "run $run:"
    cargo run -q --release -p ratomic-postgres --example bench_vs_raw -- "$PG_URL" "${1:-3}" "${2:-1}"
done
