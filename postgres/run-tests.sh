#!/usr/bin/env bash
# ratomic-postgres against a real PostgreSQL: installs it with apt when initdb
# is missing, creates a throwaway cluster in a temp dir on a free loopback
# port (as an unprivileged user: initdb refuses root), runs the crate's server
# tests (parity, concurrency, batches, gc, faults) and removes the cluster.
# Fault tests start and stop clusters of their own the same way. Nothing
# listens beyond 127.0.0.1.
#
#   bash postgres/run-tests.sh            # everything
#   bash postgres/run-tests.sh parity     # only tests whose name matches
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

# shellcheck source=postgres/server.sh
source "$here/server.sh"
trap pg_stop_all EXIT
pg_install
"$pg_bin/postgres" --version

port=$(pg_free_port)
pg_start "$port"
export RATOMIC_POSTGRES_URL=$PG_URL
# For the tests that run clusters of their own.
export RATOMIC_PG_BIN=$pg_bin RATOMIC_PG_USER=$pg_user
echo "== postgres on $RATOMIC_POSTGRES_URL"

# The server suite and the tower layer on PostgreSQL-backed limiters, in the
# feature set the other server stages share (see the file sourced).
source "$root/scripts/test-builds.sh"
cargo test --features "$server_features" --test postgres_server --test postgres -- "$@"

# `ratomic simulate --postgres` prints what the in-memory run prints, but for
# the line that says how long the run took and where it was decided.
if [[ $# -eq 0 ]]; then
    build_debug_cli
    ratomic=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/debug/ratomic
    runs=(
        ""
        "--algorithm all"
        "--rate 10/s --rate fw:100/m --rps 20 --seconds 30"
        "--arrival poisson --keys 20 --rps 300"
        "--rate 7/s --rate sw:50/10s --algorithm all --arrival poisson --seconds 20"
    )
    for flags in "${runs[@]}"; do
        # shellcheck disable=SC2086 # the flags are words
        "$ratomic" simulate $flags | grep -v '^  clock ' >"$pg_work/memory.txt"
        # shellcheck disable=SC2086
        "$ratomic" simulate $flags --postgres "$RATOMIC_POSTGRES_URL" >"$pg_work/pg-full.txt"
        grep -q 'decided on PostgreSQL' "$pg_work/pg-full.txt"
        grep -v '^  clock ' "$pg_work/pg-full.txt" >"$pg_work/pg.txt"
        diff -u "$pg_work/memory.txt" "$pg_work/pg.txt" || { echo "simulate $flags: PostgreSQL differs from memory" >&2; exit 1; }
        echo "ok: ratomic simulate $flags --postgres: the same table as in memory"
    done
    left=$("$pg_bin/psql" "$RATOMIC_POSTGRES_URL" -Atc "SELECT count(*) FROM ratomic_v1_state WHERE prefix LIKE 'ratomic-simulate:%'")
    [[ $left -eq 0 ]] || { echo "simulate --postgres left $left rows behind" >&2; exit 1; }

    # `ratomic bench --postgres` measures real round trips, single and batched.
    for batch in 1 16; do
        "$ratomic" bench --postgres "$RATOMIC_POSTGRES_URL" --seconds 0.3 --threads 2 --batch "$batch" >"$pg_work/bench.txt"
        grep -q "backend .*PostgreSQL: " "$pg_work/bench.txt"
        calls=$(sed -n 's/^  \([0-9,]*\) calls in all.*/\1/p' "$pg_work/bench.txt" | tr -d ,)
        [[ ${calls:-0} -gt 0 ]] || { cat "$pg_work/bench.txt" >&2; echo "bench --postgres made no call" >&2; exit 1; }
        echo "ok: ratomic bench --postgres --batch $batch: $calls calls"
    done
    # With leases on one hot key: most calls answered in memory.
    "$ratomic" bench --postgres "$RATOMIC_POSTGRES_URL" --seconds 0.3 --threads 2 --keys 1 --rate 100000/s --lease auto >"$pg_work/bench.txt"
    grep -q "backend .*PostgreSQL: .*(leases, auto)" "$pg_work/bench.txt"
    calls=$(sed -n 's/^  \([0-9,]*\) calls in all.*/\1/p' "$pg_work/bench.txt" | tr -d ,)
    [[ ${calls:-0} -gt 0 ]] || { cat "$pg_work/bench.txt" >&2; echo "bench --postgres --lease auto made no call" >&2; exit 1; }
    echo "ok: ratomic bench --postgres --lease auto: $calls calls"
    left=$("$pg_bin/psql" "$RATOMIC_POSTGRES_URL" -Atc "SELECT count(*) FROM ratomic_v1_state WHERE prefix LIKE 'ratomic-bench:%'")
    [[ $left -eq 0 ]] || { echo "bench --postgres left $left rows behind" >&2; exit 1; }
fi
