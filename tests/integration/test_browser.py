"""A real browser on another origin: Debian's Chromium, headless, runs the
official TypeScript SDK's client (tests/fixtures/browser/client.js, bundled
here with esbuild) in a page served by this test, and lists and calls tools
through a gateway in front of the real legacy fixture (mcp 1.x). Every
request the page makes is a CORS one: preflights, the session id read from an
answer, its end (DELETE). A page of an origin not in MCP_SHIM_ALLOWED_ORIGINS
gets nothing through.

The page's origin is http://app.example:<port> (Chromium maps the name to
127.0.0.1), the gateway's http://localhost:<port>: a loopback page origin
would be allowed without configuration (app/fronts/shared/security.py).
Chromium comes from scripts/setup_peers.sh chromium; the SDK and esbuild
from its node peer.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests import procs
from tests.integration import wire

pytestmark = [pytest.mark.peers, pytest.mark.slow]

CLIENT_SOURCE = procs.ROOT / "tests" / "fixtures" / "browser" / "client.js"
ESBUILD = procs.PEERS / "node" / "node_modules" / "esbuild" / "bin" / "esbuild"
SDK = procs.PEERS / "node" / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
ALLOWED_NAME = "app.example"
BLOCKED_NAME = "blocked.example"
PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>mcp-shim browser client</title></head>
<body>running<script type="module" src="/client.js"></script></body></html>
"""
RESULT_TIMEOUT_S = 60.0


def chromium_binary() -> str:
    """Debian's chromium; a missing one fails the test, it is not skipped."""
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None
    )
    if found is None:
        raise RuntimeError(
            "chromium is not installed: run scripts/setup_peers.sh chromium (apt-get install "
            "chromium as root); the browser test needs a real browser"
        )
    return found


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The page's script: the client and the SDK in one file, for the browser."""
    out = tmp_path_factory.mktemp("bundle") / "client.js"
    procs.require_peer(SDK)
    argv = [
        str(procs.require_peer(procs.NODE)),
        str(procs.require_peer(ESBUILD)),
        str(CLIENT_SOURCE),
        "--bundle",
        "--format=esm",
        "--platform=browser",
        "--target=chrome120",
        f"--outfile={out}",
    ]
    # The SDK resolves from the node peer's packages, not from beside the source.
    env = {**os.environ, "NODE_PATH": str(procs.PEERS / "node" / "node_modules")}
    built = subprocess.run(argv, capture_output=True, timeout=120, env=env)
    assert built.returncode == 0, (built.stdout + built.stderr).decode()[-4000:]
    return out.read_bytes()


@dataclass
class Page:
    """The test's page server: the page, its script, and the result it posts."""

    port: int
    results: queue.Queue[dict[str, Any]]

    def url(self, name: str, gateway: str) -> str:
        return f"http://{name}:{self.port}/index.html?gateway={gateway}"


@contextmanager
def page_server(port: int, script: bytes) -> Iterator[Page]:
    results: queue.Queue[dict[str, Any]] = queue.Queue()
    files = {"/index.html": ("text/html", PAGE), "/client.js": ("text/javascript", script)}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            kind, body = files.get(self.path.split("?")[0], ("text/plain", b""))
            self.send_response(200 if body else 404)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            results.put(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Page(port, results)
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def chromium(url: str, profile: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Headless Chromium showing `url`, in its own process group (its renderer,
    GPU and network processes end with it)."""
    argv = [
        chromium_binary(),
        "--headless",
        "--no-sandbox",  # as root, in a container
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-proxy-server",
        f"--host-resolver-rules=MAP {ALLOWED_NAME} 127.0.0.1, MAP {BLOCKED_NAME} 127.0.0.1",
        "--enable-logging=stderr",
        f"--user-data-dir={profile}",
        url,
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, start_new_session=True)
        try:
            yield proc
        finally:
            with _ended(proc):
                os.killpg(proc.pid, signal.SIGTERM)


@contextmanager
def _ended(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    try:
        yield
    except ProcessLookupError:
        return
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def browse(page: Page, name: str, gateway: str, tmp_path: Path) -> dict[str, Any]:
    """What the page's client reports, with Chromium's log on failure."""
    log = tmp_path / "chromium.log"
    with chromium(page.url(name, gateway), tmp_path / "profile", log):
        try:
            return page.results.get(timeout=RESULT_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(
                f"the page reported nothing within {RESULT_TIMEOUT_S:g} s; chromium's log:\n"
                + log.read_text(errors="replace")[-4000:]
            ) from None


@pytest.fixture(scope="module")
def page(bundle: bytes) -> Iterator[Page]:
    with page_server(procs.free_port(), bundle) as served:
        yield served


@pytest.fixture(scope="module")
def gateway(
    legacy_url: str, page: Page, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("browser") / "gateway.log"
    env = {"MCP_SHIM_ALLOWED_ORIGINS": f"http://{ALLOWED_NAME}:{page.port}"}
    port = procs.free_port()
    with procs.gateway(legacy_url, port, env, log):
        yield f"http://localhost:{port}/mcp", log


def test_official_client_in_a_page_of_an_allowed_origin(
    page: Page, gateway: tuple[str, Path], tmp_path: Path
) -> None:
    url, log = gateway
    result = browse(page, ALLOWED_NAME, url, tmp_path)
    assert "error" not in result, result["error"]
    assert "echo" in result["tools"]
    assert result["echo"] == [{"type": "text", "text": "from a browser"}]
    # The session id came from an answer's header the page could read.
    assert result["sessionId"]
    # Its preflights, POSTs and DELETE all passed the Origin check.
    lines = list(wire.log_lines(log))
    assert not [line for line in lines if line.get("reason") == "host_or_origin"]


def test_a_page_of_another_origin_gets_nothing_through(
    page: Page, gateway: tuple[str, Path], tmp_path: Path
) -> None:
    url, log = gateway
    result = browse(page, BLOCKED_NAME, url, tmp_path)
    assert "error" in result, result
    # The browser stopped at the preflight, which the gateway refused.
    refused = [line for line in wire.log_lines(log) if line.get("reason") == "host_or_origin"]
    assert refused and all(line["status"] == 403 for line in refused)
