#!/usr/bin/env bash
# `ratomic serve` driven by an independent gRPC client: Python grpcio with
# Envoy's protos as the gRPC project publishes them (the xds-protos package,
# generated from envoyproxy/data-plane-api). Creates its own venv under the
# target directory, builds the real `ratomic` binary, and runs pytest, which
# starts `ratomic serve` on free 127.0.0.1 ports.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
VENV="$TARGET/serve-venv"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r serve/tests/python/requirements.txt
cargo build -q -p ratomic-cli --bin ratomic
export RATOMIC_BIN="$TARGET/debug/ratomic"
exec "$VENV/bin/python" -m pytest -q serve/tests/python "$@"
