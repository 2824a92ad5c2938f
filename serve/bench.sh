#!/usr/bin/env bash
# `ratomic serve`'s decisions per second and latency, over gRPC (Envoy's RLS)
# and HTTP (the JSON API), 64 concurrent streams, one hot descriptor and 10,000
# descriptors, state in memory and on Redis (fixed windows), and over gRPC on
# Redis with token buckets without and with leases (--redis-lease auto); the
# cases interleaved, ROUNDS times.
# Server and client share this machine's cores: the client's cost is in the
# figures.
#
#   bash serve/bench.sh            # SECONDS_PER_CASE=3 ROUNDS=2
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_CASE="${SECONDS_PER_CASE:-3}"
ROUNDS="${ROUNDS:-2}"
STREAMS="${STREAMS:-64}"
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
# shellcheck source=redis/server.sh
source redis/server.sh
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    redis_stop_all
    rm -rf "$work"
}
trap cleanup EXIT
redis_install
cargo build -q --release -p ratomic-cli --bin ratomic -p ratomic-serve --bin ratomic-serve-bench
redis_port=$(free_port)
start_redis "$redis_port"

cat >"$work/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000000000}
YAML

# Token buckets on Redis: 1,000,000 a second (one token a µs, the finest a
# Redis bucket holds); a lease under auto takes up to an eighth of the burst.
cat >"$work/bench-tb.yaml" <<'YAML'
domain: bench
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000000}
YAML

start_server() { # name config [flags…]
    local name=$1 config=$2
    shift 2
    "$TARGET/release/ratomic" serve --config "$work/$config" --grpc-listen 127.0.0.1:0 \
        --http-listen 127.0.0.1:0 "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 500); do
        if grep -q "listening" "$work/$name.log"; then return; fi
        sleep 0.01
    done
    cat "$work/$name.log" >&2
    return 1
}
addr() { sed -n "s/.*listening grpc=\([^ ]*\) http=\([^ ]*\).*/\\$2/p" "$work/$1.log"; }

start_server memory bench.yaml
start_server redis bench.yaml --redis "redis://127.0.0.1:$redis_port/" --redis-timeout-ms 1000
start_server redis-tb bench-tb.yaml --redis "redis://127.0.0.1:$redis_port/" --redis-prefix tb: \
    --redis-timeout-ms 1000 --algorithm token-bucket
start_server redis-lease bench-tb.yaml --redis "redis://127.0.0.1:$redis_port/" --redis-prefix lease: \
    --redis-timeout-ms 1000 --algorithm token-bucket --redis-lease auto

echo "ratomic serve benchmark: $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD), $(nproc) CPUs, ${STREAMS} streams, ${SECONDS_PER_CASE}s per case"
for round in $(seq 1 "$ROUNDS"); do
    for backend in memory redis; do
        for keys in 1 10000; do
            echo -n "round=$round backend=$backend "
            "$TARGET/release/ratomic-serve-bench" --api grpc --addr "$(addr $backend 1)" --streams "$STREAMS" --keys "$keys" --seconds "$SECONDS_PER_CASE"
            echo -n "round=$round backend=$backend "
            "$TARGET/release/ratomic-serve-bench" --api http --addr "$(addr $backend 2)" --streams "$STREAMS" --keys "$keys" --seconds "$SECONDS_PER_CASE"
        done
    done
    for backend in redis-tb redis-lease; do
        for keys in 1 10000; do
            echo -n "round=$round backend=$backend "
            "$TARGET/release/ratomic-serve-bench" --api grpc --addr "$(addr $backend 1)" --streams "$STREAMS" --keys "$keys" --seconds "$SECONDS_PER_CASE"
        done
    done
done
