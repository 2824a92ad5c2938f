#!/usr/bin/env bash
# Checks the release workflow's format against the GitHub workflow schema
# (check-jsonschema's vendored copy: no network beyond PyPI for the tool).
# Installs the tool into target/tools-venv, outside any package.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/tools-venv
if [[ ! -x $venv/bin/check-jsonschema ]]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "check-jsonschema==0.39.0"
fi
"$venv/bin/check-jsonschema" --builtin-schema vendor.github-workflows .github/workflows/*.yml
