#!/usr/bin/env bash
# The C ABI's static library against its shared library, interleaved in one
# process (static_vs_shared.c says how). Builds libratomic first.
#
#   bash ffi-c/bench/run.sh [PAIRS]     # PAIRS of 256-call chunks a row (20000)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

CC=${CC:-gcc}
cargo build --quiet --release -p ratomic-ffi
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
lib="$target_dir/release"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# -O2 as a C program's release build; the link line of ffi-c/Makefile's
# LIBS_PRIVATE, plus -ldl for dlopen.
"$CC" -std=c11 -O2 -Wall -Wextra -Werror -I"$root/include" "$here/static_vs_shared.c" \
    "$lib/libratomic.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc -o "$out/static_vs_shared"
"$out/static_vs_shared" "$lib/libratomic.so" "$@"
