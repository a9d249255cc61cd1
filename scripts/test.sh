#!/usr/bin/env bash
# Install everything and run every check: lint, types, unit and integration
# tests against real MCP peers, the conformance suite, the Docker checks.
#
# Usage:
#   scripts/test.sh [PYTEST-ARG...]         everything: what CI runs (.ci/run); arguments
#                                          narrow the pytest run (paths, -k, -m)
#   scripts/test.sh --fast [PYTEST-ARG...]  the development tier: ruff, mypy and the unit
#                                          tests (default tests/unit), about a minute; it
#                                          installs .venv when missing and builds no peers
#
# The peers (scripts/setup_peers.sh) build in the background while .venv is
# installed and ruff and mypy run. pytest runs on MCP_SHIM_TEST_WORKERS
# processes (pytest-xdist; default two per CPU: most of an integration test's
# time is spent waiting on the processes it drives). CONTRIBUTING.md (test
# tiers) has the times of each tier and of a fresh clone's CI run.
set -euo pipefail
cd "$(dirname "$0")/.."

FAST=0
if [[ "${1:-}" == "--fast" ]]; then
    FAST=1
    shift
fi
WORKERS="${MCP_SHIM_TEST_WORKERS:-$(($(nproc) * 2))}"
# Byte-code is written (under __pycache__/, ignored by git and .dockerignore)
# even where the environment says PYTHONDONTWRITEBYTECODE: otherwise every
# gateway, probe and CLI process the tests start compiles all of app/ again
# (about 1.0 CPU-second a start instead of 0.65), and every pytest worker
# rewrites every test module's asserts again (collecting the suite: 9.6
# CPU-seconds instead of 3.3); `/usr/bin/time python -c 'import app.serving.cli'`
# in a clone with and without __pycache__/ shows it.
unset PYTHONDONTWRITEBYTECODE

if [[ $FAST -eq 0 ]]; then
    bash scripts/setup_peers.sh &
    peers=$!
    # Whatever fails first, the peers' build is never left running on its own.
    trap 'wait "$peers" 2>/dev/null || true' EXIT
fi

if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
# The fast tier installs only when .venv lacks the dev extra (pytest, pytest-xdist).
if [[ $FAST -eq 0 ]] || ! .venv/bin/python -c 'import pytest, xdist' 2>/dev/null; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy

if [[ $FAST -eq 1 ]]; then
    [[ $# -gt 0 ]] || set -- tests/unit
else
    wait "$peers" || {
        echo "test.sh: building the peers failed (scripts/setup_peers.sh, its error above)" >&2
        exit 1
    }
fi
# tests/conftest.py orders the tests and shares them out among the workers.
exec .venv/bin/pytest -q -p no:cacheprovider -n "$WORKERS" "$@"
