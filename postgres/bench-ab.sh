#!/usr/bin/env bash
# Two builds of postgres/examples/pg_bench_vs_raw.rs (say, before and after a
# change) against the same throwaway server, in turn: each run prints ratomic
# ÷ the hand-written SQL GCRA for the four cells, so each build's ratio comes
# from its own interleaved rounds, and the builds alternate (which goes first
# too). PG_SYNCHRONOUS_COMMIT sets the server's synchronous_commit (off unless
# set; PostgreSQL's default is on).
#   bash postgres/bench-ab.sh OLD_BINARY NEW_BINARY [pairs] [rounds] [seconds]
# Build the old one from a worktree, e.g.:
#   git worktree add --detach /tmp/old COMMIT && (cd /tmp/old && cargo build --release \
#     -p ratomic-postgres --example pg_bench_vs_raw)   # then /tmp/old/target/release/examples/pg_bench_vs_raw
set -euo pipefail
old=$(realpath "$1") new=$(realpath "$2")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=postgres/server.sh
source "$here/server.sh"
trap pg_stop_all EXIT
pg_install
pg_start "$(pg_free_port)"
echo "PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}'), synchronous_commit=${PG_SYNCHRONOUS_COMMIT:-off}"
for pair in $(seq 1 "${3:-3}"); do
    order=("old $old" "new $new")
    ((pair % 2 == 0)) && order=("new $new" "old $old")
    for which in "${order[@]}"; do
        echo "pair $pair, ${which%% *} (load $(cut -d' ' -f1 /proc/loadavg)):"
        "${which#* }" "$PG_URL" "${4:-3}" "${5:-1}"
    done
done
