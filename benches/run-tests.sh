#!/usr/bin/env bash
# Tests of the benchmark crate, and a check that every bench and bin builds.
# The benchmarks themselves are run by hand (see BENCHMARKS.section.md), never here.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test -p ratomic-benches
cargo check -p ratomic-benches --benches --bins
# The profiling entry point must still know its scenarios.
cargo run --release -q -p ratomic-benches --bin ops -- ratomic-hot-u64 1000
