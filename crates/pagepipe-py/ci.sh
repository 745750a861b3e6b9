#!/usr/bin/env bash
# Installs pagepipe in a fresh virtual environment with pip (maturin builds it from source;
# pip fetches maturin and pytest from PyPI), runs its pytest suite, then CPython's own
# multiprocessing tests against pagepipe.Pipe and pagepipe.Queue (tests/cpython_mp.py).
# Called by .ci/run.
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
# CPython's own multiprocessing tests of pipes, connections and queues, with pagepipe's Pipe
# and Queue in place of multiprocessing's, under fork, spawn and forkserver (about 50 s).
timeout 600 "$venv/bin/python" cpython_mp.py
