#!/usr/bin/env bash
# BENCHMARKS.md's PostgreSQL lease rows: decisions/s of `ratomic bench
# --postgres` on one hot key, lease off and auto interleaved, 1 and 64
# threads (calls in flight), on a throwaway cluster (postgres/server.sh).
# One token a µs (the finest rate whole microseconds allow) and a burst of
# 100,000,000, so that neither bounds the leased rate in a run.
#   bash postgres/bench-lease.sh [rounds] [seconds]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/.."
# shellcheck source=postgres/server.sh
source "$here/server.sh"
trap pg_stop_all EXIT
pg_install
pg_start "$(pg_free_port)"
"$pg_bin/postgres" --version
cargo build -q --release -p ratomic-cli
ratomic=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/ratomic
for round in $(seq 1 "${1:-3}"); do
    for threads in 1 64; do
        for lease in off auto; do
            echo "== round $round, $threads threads, lease $lease"
            "$ratomic" bench --postgres "$PG_URL" --keys 1 --threads "$threads" --rate 1000000/s --burst 100000000 \
                --seconds "${2:-2}" --lease "$lease" | grep -E 'decisions|calls|allowed|token' || true
        done
    done
done
