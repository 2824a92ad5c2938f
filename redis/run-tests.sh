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

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    echo "== installing redis-server (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq redis-server >/dev/null
fi
redis-server --version

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# A port nothing listens on (bash's /dev/tcp connects or fails at once).
free_port() {
    local port
    for _ in $(seq 1 200); do
        port=$((20000 + RANDOM % 30000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; return; fi
    done
    echo "no free port found" >&2; exit 1
}

start_redis() { # port [extra args…]
    local port=$1; shift
    mkdir -p "$work/$port"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work/$port" \
        --daemonize no --loglevel warning "$@" >"$work/$port/log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 500); do
        if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then return; fi
        sleep 0.01
    done
    echo "redis-server on port $port did not start:" >&2; cat "$work/$port/log" >&2; exit 1
}

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

cargo test -p ratomic-redis --features server-tests --test server -- "$@"

# `ratomic simulate --redis` prints what the in-memory run prints, but for
# the line that says how long the run took and where it was decided.
if [[ $# -eq 0 ]]; then
    cargo build -q -p ratomic-cli
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
fi
