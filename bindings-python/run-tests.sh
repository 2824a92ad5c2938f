#!/usr/bin/env bash
# Builds ratomic's Python packages as a registry would get them and tests
# them as a user would install them:
#
#   1. a fresh virtual environment (bindings-python/.venv) with the pinned
#      tools (requirements-dev.txt);
#   2. the sdist, and from it the manylinux2014 wheel (maturin unpacks the
#      sdist and builds in it, so a file the sdist lacks fails here; it links
#      through zig against glibc 2.17's symbols), which auditwheel must
#      accept;
#   3. that wheel installed into .venv: pytest (tests/, including both
#      READMEs' examples and mypy.stubtest), then stubtest once more on its
#      own so a stub drift is reported plainly;
#   4. a second fresh venv outside the repository (mktemp -d), with no Rust
#      on the PATH and pip refusing anything but wheels: the wheel installs
#      with its [redis] extra, and the READMEs' examples run there — the
#      package page's from the installed wheel's own metadata;
#   5. `pip wheel` from the sdist (a platform without our wheel builds from
#      it; in cargo's dev profile here, as step 2 already built the sdist
#      optimised), into that temporary directory, and that wheel installed
#      into a venv of its own, where it must import and decide.
#
# Needs Rust and Python >= 3.10; installs the rest into bindings-python/.venv.
#
#   bindings-python/run-tests.sh            # from anywhere
#   PYTHON=python3.12 bindings-python/run-tests.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
venv="$here/.venv"
wheels="$here/target-wheels"
target="$(cd "$here/.." && pwd)/target"

# ratomic.redis's tests start their own redis-servers (tests/test_redis.py).
# shellcheck source=../redis/server.sh
source "$here/../redis/server.sh"
# ratomic.postgres's tests run against one throwaway PostgreSQL cluster.
# shellcheck source=../postgres/server.sh
source "$here/../postgres/server.sh"
outside="$(mktemp -d)"
trap 'redis_stop_all; pg_stop_all; rm -rf "$outside"' EXIT
redis_install
pg_install
pg_start "$(pg_free_port)"
export RATOMIC_POSTGRES_URL=$PG_URL
# tests/test_postgres_restart.py crashes and restarts a cluster of its own
# (tests/postgres_cluster.py): these binaries, as this user.
export RATOMIC_PG_BIN=$pg_bin RATOMIC_PG_USER=$pg_user

echo "==> fresh venv in $venv ($("$python" --version))"
rm -rf "$venv" "$wheels"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r "$here/requirements-dev.txt"

# maturin finds zig as `python -m ziglang` of the first python on the PATH.
echo "==> building the sdist, and from it the manylinux2014 wheel (maturin build --release --sdist --zig)"
PATH="$venv/bin:$PATH" "$venv/bin/maturin" build --release --sdist --zig --compatibility manylinux2014 \
    --manifest-path "$here/Cargo.toml" --out "$wheels"
sdist=$(ls "$wheels"/ratomic-*.tar.gz)
wheel=$(ls "$wheels"/ratomic-*manylinux*.whl)

echo "==> auditwheel show $(basename "$wheel")"
"$venv/bin/auditwheel" show "$wheel" | tee "$outside/auditwheel.txt"
if ! tr -s ' \n' ' ' <"$outside/auditwheel.txt" | grep -q "platform tag: \"manylinux_2_17_$(uname -m)\""; then
    echo "auditwheel does not find the wheel manylinux2014 (manylinux_2_17)" >&2
    exit 1
fi
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheel"

# Run from outside the source tree, so `import ratomic` is the installed wheel.
cd "$here/tests"
echo "==> pytest"
"$venv/bin/python" -m pytest -c "$here/pyproject.toml" --rootdir "$here" "$here/tests"
echo "==> mypy.stubtest"
"$venv/bin/python" -m mypy.stubtest ratomic --allowlist "$here/stubtest-allowlist.txt"

echo "==> the wheel in a fresh venv outside the repository ($outside), no Rust on the PATH"
cd "$outside"
"$python" -m venv "$outside/venv"
# A PATH of the venv and a directory holding only what the examples run
# (redis-server): no cargo, rustc or C compiler can be found, wherever the
# machine installed them (rustup, apt).
mkdir "$outside/bin"
ln -s "$(command -v redis-server)" "$outside/bin/redis-server"
bare="$outside/venv/bin:$outside/bin"
PATH="$bare" "$outside/venv/bin/python" -m pip install --quiet --upgrade pip
# Only wheels: nothing may be built here. The README's examples also need
# fastapi and flask (the frameworks they show), and pytest runs them.
pins=$(grep -E '^(pytest|fastapi|flask|redis|psycopg\[binary\])==' "$here/requirements-dev.txt")
# shellcheck disable=SC2086
PATH="$bare" "$outside/venv/bin/python" -m pip install --quiet --only-binary=:all: "$wheel[redis,postgres]" $pins
for tool in cargo rustc cc; do
    if PATH="$bare" command -v "$tool" >/dev/null; then
        echo "$tool is on the bare PATH: the install would not prove it needs no Rust" >&2
        exit 1
    fi
done
mkdir "$outside/smoke"
cp "$here/tests/test_readme.py" "$here/tests/redis_server.py" "$outside/smoke/"
cp "$here/../README.md" "$outside/smoke/project-README.md"
# The package's page as PyPI shows it: the README inside the installed wheel.
PATH="$bare" "$outside/venv/bin/python" -c \
    'import importlib.metadata as m, sys; sys.stdout.write(m.metadata("ratomic").get_payload())' \
    >"$outside/smoke/package-README.md"
grep -q "ratomic for Python" "$outside/smoke/package-README.md"
# PyPI cannot follow a path into the repository, nor a user open SPEC.md.
if grep -nE '\]\((\.\.?/|[A-Za-z_-]+/[^):]*\))|SPEC|§' "$outside/smoke/package-README.md"; then
    echo "the package's README points where a package user cannot follow (above)" >&2
    exit 1
fi
(
    cd "$outside/smoke"
    PATH="$bare" RATOMIC_READMES="$outside/smoke/package-README.md:$outside/smoke/project-README.md" \
        "$outside/venv/bin/python" -m pytest -q -p no:cacheprovider -W error "$outside/smoke/test_readme.py"
    PATH="$bare" "$outside/venv/bin/python" -c \
        'import importlib.metadata as m, ratomic, sys
assert ratomic.__file__.startswith(sys.prefix), ratomic.__file__
licenses = sorted(f.name for f in m.files("ratomic") if "licenses" in f.parts)
assert licenses == ["LICENSE-APACHE", "LICENSE-MIT"], licenses
print("ratomic", ratomic.__version__, "from", ratomic.__file__, "with", *licenses)'
)

echo "==> pip wheel from the sdist ($(basename "$sdist"))"
# --no-build-isolation: the pinned maturin of .venv. What this checks is that
# pip builds the sdist through maturin's PEP 517 backend; step 2 built the
# same sources optimised, so this build is in the dev profile (~35 s against
# ~85 s on 2 cores), in the workspace's target directory.
PATH="$venv/bin:$PATH" CARGO_TARGET_DIR="$target" MATURIN_PEP517_ARGS="--profile dev" \
    "$venv/bin/python" -m pip wheel --quiet --no-deps --no-build-isolation \
    -w "$outside/from-sdist" "$sdist"
# That wheel works too: installed alone into a venv of its own, it imports and decides.
"$python" -m venv "$outside/sdist-venv"
"$outside/sdist-venv/bin/python" -m pip install --quiet --no-deps --no-index "$outside/from-sdist"/ratomic-*.whl
(cd "$outside" && "$outside/sdist-venv/bin/python" -c \
    'import ratomic; d = ratomic.TokenBucket("5/min").allow("k"); assert d.allowed and d.remaining == 4, d; print("the wheel built from the sdist:", d)')
