#!/usr/bin/env bash
# BENCHMARKS.md's Redis table: starts a redis-server (no persistence) on a
# free loopback port and runs redis/examples/bench_vs_raw.rs three times.
#   bash redis/bench.sh [rounds] [seconds]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/.."
# shellcheck source=redis/server.sh
source "$here/server.sh"
trap redis_stop_all EXIT
redis_install
port=$(free_port)
start_redis "$port"
redis-server --version
cargo build -q --release -p ratomic-redis --example bench_vs_raw --example deny_cache
echo "deny cache:"
cargo run -q --release -p ratomic-redis --example deny_cache -- "redis://127.0.0.1:$port/"
for run in 1 2 3; do
    echo "run $run:"
    cargo run -q --release -p ratomic-redis --example bench_vs_raw -- "redis://127.0.0.1:$port/" "${1:-3}" "${2:-1}"
done
