#!/usr/bin/env bash
# Two builds of `ratomic serve` side by side: decisions per second of each,
# state in memory, over gRPC (one descriptor and 10,000) and HTTP (one), the
# cases interleaved and the order of the two alternating each round. Prints
# one line per case and build, then each case's new ÷ old per round.
#
#   bash serve/bench-ab.sh OLD_RATOMIC NEW_RATOMIC   # ROUNDS=4 SECONDS_PER_CASE=3
#
# Build the old one from another commit, e.g.
#   git worktree add /tmp/old <commit> && (cd /tmp/old && CARGO_TARGET_DIR=$PWD/../old-target \
#       cargo build --release -p ratomic-cli --bin ratomic)
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1 new=$2
ROUNDS="${ROUNDS:-4}"
SECONDS_PER_CASE="${SECONDS_PER_CASE:-3}"
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build -q --release -p ratomic-serve --bin ratomic-serve-bench
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
cat >"$work/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000000000}
YAML
start() { # name binary
    "$2" serve --config "$work/bench.yaml" --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 >"$work/$1.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 500); do
        if grep -q listening "$work/$1.log"; then return; fi
        sleep 0.01
    done
    cat "$work/$1.log" >&2
    return 1
}
addr() { sed -n "s/.*listening grpc=\([^ ]*\) http=\([^ ]*\).*/\\$2/p" "$work/$1.log"; }
start old "$old"
start new "$new"
bench=("$TARGET/release/ratomic-serve-bench" --streams 64 --seconds "$SECONDS_PER_CASE")
out="$work/out"
for round in $(seq 1 "$ROUNDS"); do
    order=(old new)
    if ((round % 2 == 0)); then order=(new old); fi
    for case in "grpc 1 1" "grpc 1 10000" "http 2 1"; do
        read -r api slot keys <<<"$case"
        for who in "${order[@]}"; do
            echo "round=$round who=$who $("${bench[@]}" --api "$api" --addr "$(addr "$who" "$slot")" --keys "$keys")"
        done
    done
done | tee "$out"
echo "new ÷ old, decisions/s, per round:"
awk '{for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      c = f["api"] " keys=" f["keys"]; d[f["round"], c, f["who"]] = f["decisions/s"]; cases[c] = 1; n = f["round"] }
     END { for (c in cases) { line = c ":"; for (r = 1; r <= n; r++) line = line sprintf(" %.2f", d[r, c, "new"] / d[r, c, "old"]); print line } }' "$out"
