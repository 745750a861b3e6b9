#!/usr/bin/env bash
# Installs pagepipe in a fresh virtual environment with pip (maturin builds it from source;
# pip fetches maturin and pytest from PyPI) and runs its pytest suite. Called by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${PAGEPIPE_PY_VENV:-${CARGO_TARGET_DIR:-target}/py-venv}"
venv="$(realpath -m "$venv")" # absolute: the tests run from another directory
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q ./crates/pagepipe-py pytest pytest-timeout
cd crates/pagepipe-py/tests  # import the installed package, not the source tree
"$venv/bin/python" -m pytest -q -p no:cacheprovider --timeout 120 .
