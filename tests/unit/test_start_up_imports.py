"""What the command line loads at start-up (the idle RSS: bench/memory.py,
docs/performance.md): checked in a fresh
interpreter, as sys.modules is per process, so that a new import does not undo
it silently."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests import procs

# aiohttp and what only it brings (httpx-aiohttp, yarl, attrs, aiohappyeyeballs,
# aiosignal, propcache): about 6 MB of idle RSS, imported by the first request
# that needs it (app/upstream/httpclient/aiohttp_client.py), which a plain gateway in front
# of a legacy upstream never sends on the default h1 transport.
AIOHTTP = ("aiohttp", "httpx_aiohttp", "yarl", "attr", "aiohappyeyeballs", "aiosignal", "propcache")

_SCRIPT = """
import json, os, sys
import app.serving.cli
import frozenlist
app.serving.cli.fix_mmap_threshold()
app.serving.cli.release_free_heap()
import app.upstream.httpclient.aiohttp_client  # what the first request that needs aiohttp imports
from aiohttp import connector
print(json.dumps({
    "modules": sorted(m for m in ("ctypes.util", "certifi") if m in sys.modules),
    "aiohttp_certificates": connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509"]
    + connector._SSL_CONTEXT_UNVERIFIED.cert_store_stats()["x509"],
    "pure_frozenlist": frozenlist.FrozenList is frozenlist.PyFrozenList,
    "libstdc++": "libstdc++" in open("/proc/self/maps").read(),
    "env_left": "FROZENLIST_NO_EXTENSIONS" in os.environ,
}))
"""


def _run(script: str, env: dict[str, str] | None = None) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=procs.ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def test_command_line_start_up_loads_no_ca_bundle_no_library_search_no_libstdcxx() -> None:
    report = _run(_SCRIPT)
    # ctypes.util's find_library runs `ldconfig -p` in a child process; certifi is
    # imported by the first TLS handshake (app/upstream/httpclient/tls.py), not at import.
    # frozenlist's compiled form is C++ (libstdc++ in the process) for a class only
    # aiohttp's tracing uses (app/upstream/__init__.py); the switch is not left set.
    # aiohttp's import-time CA contexts are replaced by deferred ones as it is imported.
    assert report == {
        "modules": [],
        "aiohttp_certificates": 0,
        "pure_frozenlist": True,
        "libstdc++": False,
        "env_left": False,
    }, report


_BUILT = """
import asyncio, json, sys
import app.serving.cli
from app.settings.load import load_settings
from app.serving.server import create_app
from app.upstream.choice import build_transport

AIOHTTP = {aiohttp!r}
settings = load_settings()
create_app(settings)

async def built() -> list[str]:
    transport, _ = build_transport(settings)  # as the lifespan builds it
    try:
        return sorted(m for m in AIOHTTP if m in sys.modules)
    finally:
        await transport.aclose()

print(json.dumps(asyncio.run(built())))
"""


def test_command_line_app_and_upstream_client_load_no_aiohttp_on_h1() -> None:
    script = _BUILT.format(aiohttp=AIOHTTP)
    url = {"MCP_SHIM_UPSTREAM_URL": "http://127.0.0.1:9/mcp"}
    assert _run(script, {**url, "MCP_SHIM_UPSTREAM_HTTP_TRANSPORT": "h1"}) == []
    # The check sees aiohttp where the setting asks for it at once (its session POSTs).
    loaded = _run(script, {**url, "MCP_SHIM_UPSTREAM_HTTP_TRANSPORT": "aiohttp"})
    assert "aiohttp" in loaded and "httpx_aiohttp" in loaded, loaded
