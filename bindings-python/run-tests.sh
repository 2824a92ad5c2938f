#!/usr/bin/env bash
# Builds the ratomic wheel into a fresh virtual environment and runs every
# Python test: pytest (tests/, including the README examples and
# mypy.stubtest), then stubtest once more on its own so a stub drift is
# reported plainly. Needs Rust and Python >= 3.10; installs the rest
# (pinned in requirements-dev.txt) into bindings-python/.venv.
#
#   bindings-python/run-tests.sh            # from anywhere
#   PYTHON=python3.12 bindings-python/run-tests.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
venv="$here/.venv"
wheels="$here/target-wheels"

# ratomic.redis's tests start their own redis-servers (tests/test_redis.py).
# shellcheck source=../redis/server.sh
source "$here/../redis/server.sh"
trap redis_stop_all EXIT
redis_install

echo "==> fresh venv in $venv ($("$python" --version))"
rm -rf "$venv" "$wheels"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r "$here/requirements-dev.txt"

echo "==> building the wheel (maturin build --release)"
"$venv/bin/maturin" build --release --manifest-path "$here/Cargo.toml" --out "$wheels"
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheels"/ratomic-*.whl

# Run from outside the source tree, so `import ratomic` is the installed wheel.
cd "$here/tests"
echo "==> pytest"
"$venv/bin/python" -m pytest -c "$here/pyproject.toml" --rootdir "$here" "$here/tests"
echo "==> mypy.stubtest"
"$venv/bin/python" -m mypy.stubtest ratomic --allowlist "$here/stubtest-allowlist.txt"
