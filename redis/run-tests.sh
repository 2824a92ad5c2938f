#!/usr/bin/env bash
# ratomic-redis against real servers: installs redis-server with apt when it
# is missing, starts one on a free loopback port with no persistence, runs
# the crate's server tests (parity, concurrency, NOSCRIPT, batches, faults)
# and stops it. Fault tests start and kill their own servers the same way.
# Nothing listens beyond 127.0.0.1.
#
#   bash redis/run-tests.sh            # everything
#   bash redis/run-tests.sh parity     # only tests whose name matches
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

# shellcheck source=redis/server.sh
source "$here/server.sh"
trap redis_stop_all EXIT
redis_install
redis-server --version
work=$redis_work

port=$(free_port)
start_redis "$port"
export RATOMIC_REDIS_URL="redis://127.0.0.1:$port/"
echo "== redis-server on $RATOMIC_REDIS_URL"

# A 3-node Redis Cluster (no replicas), for the cluster tests.
cluster=()
for _ in 1 2 3; do
    p=$(free_port)
    start_redis "$p" --cluster-enabled yes --cluster-config-file "$work/$p/nodes.conf" --cluster-node-timeout 5000
    cluster+=("127.0.0.1:$p")
done
redis-cli --cluster create "${cluster[@]}" --cluster-replicas 0 --cluster-yes >"$work/cluster-create.log" 2>&1 ||
    { cat "$work/cluster-create.log" >&2; exit 1; }
for node in "${cluster[@]}"; do
    for _ in $(seq 1 1000); do
        if redis-cli -p "${node#*:}" cluster info | grep -q 'cluster_state:ok'; then break; fi
        sleep 0.01
    done
    redis-cli -p "${node#*:}" cluster info | grep -q 'cluster_state:ok' ||
        { echo "cluster node $node is not ok" >&2; exit 1; }
done
RATOMIC_REDIS_CLUSTER=$(printf 'redis://%s/,' "${cluster[@]}")
export RATOMIC_REDIS_CLUSTER=${RATOMIC_REDIS_CLUSTER%,}
echo "== redis cluster on $RATOMIC_REDIS_CLUSTER"

# The server suite and the tower layer on Redis-backed limiters, in the
# feature set the other server stages share (see the file sourced).
source "$root/scripts/test-builds.sh"
cargo test --features "$server_features" --test redis_server --test redis -- "$@"

# `ratomic simulate --redis` prints what the in-memory run prints, but for
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
        "$ratomic" simulate $flags | grep -v '^  clock ' >"$work/memory.txt"
        # shellcheck disable=SC2086
        "$ratomic" simulate $flags --redis "$RATOMIC_REDIS_URL" >"$work/redis-full.txt"
        grep -q 'decided on Redis' "$work/redis-full.txt"
        grep -v '^  clock ' "$work/redis-full.txt" >"$work/redis.txt"
        diff -u "$work/memory.txt" "$work/redis.txt" || { echo "simulate $flags: Redis differs from memory" >&2; exit 1; }
        echo "ok: ratomic simulate $flags --redis: the same table as in memory"
    done
    left=$(redis-cli -p "$port" --scan --pattern 'ratomic-simulate:*' | wc -l)
    [[ $left -eq 0 ]] || { echo "simulate --redis left $left keys behind" >&2; exit 1; }

    # `ratomic bench --redis` measures real round trips, single and batched.
    for batch in 1 16; do
        "$ratomic" bench --redis "$RATOMIC_REDIS_URL" --seconds 0.3 --threads 2 --batch "$batch" >"$work/bench.txt"
        grep -q "backend .*Redis at $RATOMIC_REDIS_URL" "$work/bench.txt"
        calls=$(sed -n 's/^  \([0-9,]*\) calls in all.*/\1/p' "$work/bench.txt" | tr -d ,)
        [[ ${calls:-0} -gt 0 ]] || { cat "$work/bench.txt" >&2; echo "bench --redis made no call" >&2; exit 1; }
        echo "ok: ratomic bench --redis --batch $batch: $calls calls"
    done
fi
