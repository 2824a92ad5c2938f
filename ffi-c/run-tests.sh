#!/usr/bin/env bash
# Everything the C ABI promises, checked from C: build, header drift, C/C++
# tests under AddressSanitizer + UBSan (and valgrind when it is installed),
# and install + pkg-config with the README's examples. The crate's Rust unit
# tests (panic boundary, codes) run with the workspace's in `make test-rust`
# (plain `cargo test`): `cargo test -p ratomic-ffi` here resolved its
# dependencies' features apart from the workspace and rebuilt ~50 crates.
# Needs: Rust (cargo), gcc, g++, make, pkg-config, python3; installs doxygen
# with apt when it is missing (as redis/server.sh does redis-server).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

CC=${CC:-gcc}
CXX=${CXX:-g++}
for tool in cargo "$CC" "$CXX" make pkg-config python3; do
    command -v "$tool" >/dev/null || { echo "run-tests.sh: '$tool' is required" >&2; exit 1; }
done

suites=0
step() { printf '\n== %s\n' "$*"; }

# The library in the dev profile (debug assertions and overflow checks on),
# built with the workspace's features: after `cargo test` (CI's test-rust)
# only libratomic.{a,so} are left to link. `cargo build --release -p
# ratomic-ffi` resolved its dependencies' features apart from the workspace
# and built ~50 crates again, optimised (~3 minutes on 2 cores). release.yml
# builds the release library from the same sources.
step "cargo build --lib --tests (libratomic.{a,so}, dev profile, the workspace's features)"
cargo build --lib --tests

step "header drift: include/ratomic.h against a fresh cbindgen generation"
cargo run --quiet -p ratomic-ffi-header -- --check
suites=$((suites + 1))

step "doxygen: every declaration, parameter and return value of the header documented"
if ! command -v doxygen >/dev/null; then
    echo "== installing doxygen (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends doxygen >/dev/null
fi
doxygen_out=$(mktemp -d)
# WARN_AS_ERROR fails on an undocumented declaration or a malformed command;
# doxygen-check.py then reads the XML for every @param and @return.
(cat "$here/Doxyfile"; echo "OUTPUT_DIRECTORY=$doxygen_out") | doxygen -
python3 "$here/doxygen-check.py" "$doxygen_out/xml"
rm -rf "$doxygen_out"
suites=$((suites + 1))

target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
lib="$target_dir/debug"
[[ -f "$lib/libratomic.a" && -f "$lib/libratomic.so" ]] || { echo "no libratomic in $lib" >&2; exit 1; }

step "the shared library exports ratomic_* and nothing else"
others=$(nm -D --defined-only "$lib/libratomic.so" | awk '$2 ~ /^[TDBR]$/ {print $3}' | grep -v '^ratomic_' || true)
if [[ -n "$others" ]]; then echo "unexpected exported symbols:" >&2; echo "$others" >&2; exit 1; fi
nm -D --defined-only "$lib/libratomic.so" | grep -c ' T ratomic_' | sed 's/$/ functions exported/'

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

# Static link: the test binaries are self-contained, and LeakSanitizer sees
# every allocation the library makes. LIBS_PRIVATE as in ffi-c/Makefile.
libs=("$lib/libratomic.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc)
cflags=(-std=c11 -Wall -Wextra -Wpedantic -Werror -g -O1 -fno-omit-frame-pointer -I"$root/include")
cxxflags=(-std=c++17 -Wall -Wextra -Wpedantic -Werror -g -O1 -fno-omit-frame-pointer -I"$root/include")
san=(-fsanitize=address,undefined -fno-sanitize-recover=all)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# Runs `FN NAME` for each NAME, two at a time (each one process; CI has two
# cores), then prints each one's output under its step line (`TITLE`, with
# NAME for %s), in order, and counts it. Fails, once all have run, if any did.
two_at_a_time() {  # FN TITLE NAME...
    local fn=$1 title=$2 i failed=()
    shift 2
    local names=("$@") codes=() pids=()
    # shellcheck disable=SC2059
    printf '\n== %s, two at a time (output follows, in order, once each has run)\n' "$(printf "$title" "{${names[*]}}")"
    for i in "${!names[@]}"; do
        if ((i >= 2)); then wait "${pids[i - 2]}" && codes[i - 2]=0 || codes[i - 2]=$?; fi
        "$fn" "${names[i]}" >"$build/out.$fn.${names[i]}" 2>&1 &
        pids[i]=$!
    done
    for i in "${!names[@]}"; do
        [[ -n "${codes[i]:-}" ]] || { wait "${pids[i]}" && codes[i]=0 || codes[i]=$?; }
        # shellcheck disable=SC2059 # the title is the format
        step "$(printf "$title" "${names[i]}")"
        cat "$build/out.$fn.${names[i]}"
        if ((codes[i] != 0)); then
            echo "FAILED (exit ${codes[i]})"
            failed+=("${names[i]}")
        else
            suites=$((suites + 1))
        fi
    done
    if ((${#failed[@]} > 0)); then echo "failed: ${failed[*]}" >&2; return 1; fi
}

asan_test() {  # NAME: tests/test_NAME.c, linked statically, under ASan + UBSan
    "$CC" "${cflags[@]}" "${san[@]}" "$here/tests/test_$1.c" "${libs[@]}" -o "$build/test_$1"
    "$build/test_$1"
}
two_at_a_time asan_test "C test_%s (ASan + UBSan)" api kinds contract course threads quotas stack headers shared direct messages

step "the static-vs-shared bench (bench/static_vs_shared.c) builds and runs: 2 chunk pairs, no timing"
"$CC" "${cflags[@]}" "$here/bench/static_vs_shared.c" "${libs[@]}" -o "$build/static_vs_shared"
"$build/static_vs_shared" "$lib/libratomic.so" 2 >/dev/null
suites=$((suites + 1))

step "C test_redis (ASan + UBSan) against a real redis-server"
# shellcheck source=redis/server.sh
source "$root/redis/server.sh"
trap 'redis_stop_all; rm -rf "$build"' EXIT
redis_install
redis_port=$(free_port)
start_redis "$redis_port"
"$CC" "${cflags[@]}" "${san[@]}" "$here/tests/test_redis.c" "${libs[@]}" -o "$build/test_redis"
RATOMIC_REDIS_URL="redis://127.0.0.1:$redis_port/" "$build/test_redis"
suites=$((suites + 1))

step "C test_postgres (ASan + UBSan) against a throwaway PostgreSQL cluster"
# shellcheck source=postgres/server.sh
source "$root/postgres/server.sh"
trap 'redis_stop_all; pg_stop_all; rm -rf "$build"' EXIT
pg_install
pg_start "$(pg_free_port)"
"$CC" "${cflags[@]}" "${san[@]}" "$here/tests/test_postgres.c" "${libs[@]}" -o "$build/test_postgres"
RATOMIC_POSTGRES_URL=$PG_URL "$build/test_postgres"
suites=$((suites + 1))

step "C++ test_cpp (ASan + UBSan)"
"$CXX" "${cxxflags[@]}" "${san[@]}" "$here/tests/test_cpp.cpp" "${libs[@]}" -o "$build/test_cpp"
"$build/test_cpp"
suites=$((suites + 1))

step "the header alone compiles as C11 and C++11 with every warning"
printf '#include "ratomic.h"\nint main(void) { return RATOMIC_OK; }\n' > "$build/header_only.c"
"$CC" "${cflags[@]}" -c "$build/header_only.c" -o "$build/header_only_c.o"
"$CXX" -std=c++11 -Wall -Wextra -Wpedantic -Werror -I"$root/include" -x c++ -c "$build/header_only.c" -o "$build/header_only_cpp.o"
suites=$((suites + 1))

if command -v valgrind >/dev/null; then
    ln -sf "$lib/libratomic.so" "$build/libratomic.so.0.1"   # its SONAME
    valgrind_test() {  # NAME: tests/test_NAME.c against libratomic.so
        "$CC" "${cflags[@]}" "$here/tests/test_$1.c" -L"$lib" -lratomic -lpthread -lm -o "$build/vg_$1"
        LD_LIBRARY_PATH="$build" valgrind -q --error-exitcode=1 --leak-check=full \
            --errors-for-leak-kinds=definite,indirect "$build/vg_$1"
    }
    two_at_a_time valgrind_test "valgrind: test_%s against the shared library" \
        api kinds contract course quotas stack headers shared direct messages
else
    step "valgrind not installed: the ASan + UBSan runs above are the memory checks"
fi

step "make install into a temporary prefix; build the README examples with pkg-config"
prefix="$build/prefix"
make -s -C "$here" install PREFIX="$prefix" BUILT_DIR="$lib" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[[ "$(pkg-config --modversion ratomic)" == "$(sed -n 's/^#define RATOMIC_VERSION_STRING "\(.*\)"/\1/p' include/ratomic.h)" ]]
# An example's block, and the ```text block after it (its output), from the
# project README: the first of each fence after the marker.
readme_block() {  # marker fence
    awk -v marker="$1" -v fence="$2" 'index($0, marker) == 1 {armed=1; next} armed && $0 == fence {on=1; next} on && /^```$/ {exit} on {print}' \
        "$root/README.md"
}
# What an example printed against what the README shows it printing. The
# examples run on the real clock, so time passes between their calls: a
# "retry in N s" (or ms) may read less than the README's N — never more,
# never 0. Every other line must be the README's, exactly.
check_output() {  # expected actual
    python3 - "$1" "$2" <<'PY'
import itertools, re, sys
expected = open(sys.argv[1]).read().splitlines()
actual = open(sys.argv[2]).read().splitlines()
wait = re.compile(r"^(.* retry in )([0-9.]+)( m?s)$")
def agrees(e, a):
    me, ma = wait.match(e), wait.match(a)
    if me and ma and (me.group(1), me.group(3)) == (ma.group(1), ma.group(3)):
        return 0 < float(ma.group(2)) <= float(me.group(2))
    return e == a
if len(expected) != len(actual) or not all(agrees(e, a) for e, a in zip(expected, actual)):
    rows = "\n".join(f"  {a:<40} | {e}" for a, e in itertools.zip_longest(actual, expected, fillvalue=""))
    sys.exit(f"{sys.argv[2]}: the example printed (left) what the README (right) does not show:\n{rows}")
PY
}
readme_block '<!-- example:c ' '```c' > "$build/example.c"
readme_block '<!-- example:c ' '```text' > "$build/example.expected"
[[ -s "$build/example.c" && -s "$build/example.expected" ]] || { echo "no C example found in README.md" >&2; exit 1; }
(
    cd "$build"
    # The command the README shows, verbatim apart from the warning flags.
    cc -std=c11 -Wall -Wextra -Wpedantic -Werror example.c $(pkg-config --cflags --libs ratomic) \
        -Wl,-rpath,$(pkg-config --variable=libdir ratomic) -o example && ./example > example.out
)
cat "$build/example.out"
check_output "$build/example.expected" "$build/example.out"
# The direct bucket's example, the same way.
readme_block '<!-- example:c-direct ' '```c' > "$build/direct.c"
readme_block '<!-- example:c-direct ' '```text' > "$build/direct.expected"
[[ -s "$build/direct.c" && -s "$build/direct.expected" ]] || { echo "no direct bucket C example found in README.md" >&2; exit 1; }
(
    cd "$build"
    cc -std=c11 -Wall -Wextra -Wpedantic -Werror direct.c $(pkg-config --cflags --libs ratomic) \
        -Wl,-rpath,$(pkg-config --variable=libdir ratomic) -o direct && ./direct > direct.out
)
cat "$build/direct.out"
check_output "$build/direct.expected" "$build/direct.out"
make -s -C "$here" uninstall PREFIX="$prefix" >/dev/null
[[ ! -e "$prefix/lib/libratomic.so" && ! -e "$prefix/include/ratomic.h" ]]
suites=$((suites + 1))

step "the release tarball: staged as release.yml packs it, unpacked elsewhere, used with no Rust on PATH"
# release.yml: make install PREFIX=/usr/local DESTDIR=stage; tar of include/ and lib/.
make -s -C "$here" install PREFIX=/usr/local DESTDIR="$build/stage" BUILT_DIR="$lib" >/dev/null
# The release's libraries carry no debug information (profile.release has
# `debug = false`): neither does this copy of the dev build (~270 MB to pack
# with it).
find "$build/stage/usr/local/lib" -maxdepth 1 -type f -name 'libratomic.*' -exec strip --strip-debug {} +
tar -C "$build/stage/usr/local" -czf "$build/libratomic.tar.gz" include lib
mkdir -p "$build/unpacked/opt/ratomic"
tar -C "$build/unpacked/opt/ratomic" -xzf "$build/libratomic.tar.gz"
(
    cd "$build"
    # A clean environment: the system's compiler and pkg-config, no
    # ~/.cargo/bin on PATH, nothing of the repository but the example.
    env -i PATH=/usr/bin:/bin HOME="$build" PKG_CONFIG_PATH="$build/unpacked/opt/ratomic/lib/pkgconfig" sh -c '
        if command -v cargo >/dev/null; then echo "note: this system has cargo in /usr/bin or /bin; nothing below calls it" >&2; fi
        cc -std=c11 -Wall -Wextra -Wpedantic -Werror example.c $(pkg-config --cflags --libs ratomic) \
            -Wl,-rpath,$(pkg-config --variable=libdir ratomic) -o example-unpacked && ./example-unpacked
    ' > example-unpacked.out
)
check_output "$build/example.expected" "$build/example-unpacked.out"
suites=$((suites + 1))

printf '\nffi-c: %d passed, 0 failed\n' "$suites"
