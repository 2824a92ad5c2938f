#!/usr/bin/env bash
# `ratomic serve` driven by an independent gRPC client: Python grpcio with
# Envoy's protos as the gRPC project publishes them (the xds-protos package,
# generated from envoyproxy/data-plane-api). Creates its own venv under the
# target directory, builds the real `ratomic` binary, and runs pytest, which
# starts `ratomic serve` on free 127.0.0.1 ports. Two redis-servers (redis/server.sh)
# serve the Redis tests: one shared by two `ratomic serve`s, one that a test stops
# (SIGSTOP) to lose the backend; a throwaway PostgreSQL cluster (postgres/server.sh)
# serves two `ratomic serve --postgres` sharing it.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=redis/server.sh
source redis/server.sh
# shellcheck source=postgres/server.sh
source postgres/server.sh
trap 'redis_stop_all; pg_stop_all' EXIT
redis_install
pg_install
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
VENV="$TARGET/serve-venv"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r serve/tests/python/requirements.txt
source scripts/test-builds.sh
build_debug_cli
export RATOMIC_BIN="$TARGET/debug/ratomic"
RATOMIC_TEST_REDIS_PORT=$(free_port)
start_redis "$RATOMIC_TEST_REDIS_PORT"
RATOMIC_TEST_REDIS_VICTIM_PORT=$(free_port)
start_redis "$RATOMIC_TEST_REDIS_VICTIM_PORT"
RATOMIC_TEST_REDIS_VICTIM_PID=${redis_pids[-1]}
export RATOMIC_TEST_REDIS_PORT RATOMIC_TEST_REDIS_VICTIM_PORT RATOMIC_TEST_REDIS_VICTIM_PID
pg_start "$(pg_free_port)"
export RATOMIC_TEST_POSTGRES_URL=$PG_URL
"$VENV/bin/python" -m pytest -q serve/tests/python "$@"
