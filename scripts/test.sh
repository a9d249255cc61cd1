#!/usr/bin/env bash
# Install everything and run every check: lint, types, unit and integration
# tests against real MCP peers, the conformance suite, the Docker checks.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
bash scripts/setup_peers.sh

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest -q -p no:cacheprovider "$@"
