"""`mcp-shim probe` (issue 11) against real servers: the legacy fixture (mcp 1.x)
over Streamable HTTP and over stdio, and the published
`@modelcontextprotocol/server-everything` over stdio; then the ways it fails.

The probe runs as an operator runs it: `python -m app.serving.cli probe` in a process
of its own, configured by the gateway's environment variables.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import procs
from tests.integration.everything import EVERYTHING, NPM, everything_sse
from tests.integration.recording_proxy import RecordingProxy

pytestmark = pytest.mark.peers

# Keys of the documented --json shape (docs/probe.md).
REPORT_KEYS = {
    "shape",
    "ok",
    "upstream",
    "transport",
    "server",
    "era",
    "protocolVersion",
    "offeredProtocolVersion",
    "capabilities",
    "modernCapabilities",
    "instructions",
    "tools",
    "prompts",
    "resources",
    "resourceTemplates",
    "listErrors",
    "modernVersion",
    "translations",
    "dualEra",
    "otherEra",
    "eraChoices",
    "elapsedMs",
}
# Methods without side effects (issue 11: "initialize/server/discover and list
# methods only").
HARMLESS = {
    "server/discover",
    "initialize",
    "notifications/initialized",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
}


def probe(*args: str, timeout: float = 60.0, **env: str) -> subprocess.CompletedProcess[str]:
    """`mcp-shim probe ARGS` with only these MCP_SHIM_* settings."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_SHIM_")}
    return subprocess.run(
        [sys.executable, "-m", "app.serving.cli", "probe", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=procs.ROOT,
    )


def report_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def fixture_command(*prefix: str) -> str:
    return shlex.join(
        [*prefix, str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE), "--stdio"]
    )


def processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (a child the probe started)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in environ and state != "Z":
            found.append(int(name))
    return found


def ids_of(report: dict[str, Any]) -> set[str]:
    return {item["id"] for item in report["translations"]}


# -- the legacy fixture over HTTP ----------------------------------------------


def test_probe_of_the_fixture_over_http_sends_nothing_with_side_effects(
    legacy_url: str,
) -> None:
    with RecordingProxy(legacy_url) as proxy:
        done = probe("--json", MCP_SHIM_UPSTREAM_URL=proxy.url)
        report = report_of(done)
        records = proxy.snapshot()
    assert set(report) == REPORT_KEYS
    assert report["ok"] is True and report["shape"] == 1
    assert report["transport"] == "streamable-http"
    assert report["upstream"] == proxy.url
    assert report["server"] == {"name": "mcp-shim-legacy-fixture", "version": "1.0.0"}
    assert report["era"] == "legacy"
    assert report["protocolVersion"] == report["offeredProtocolVersion"] == "2025-11-25"
    assert "echo" in report["tools"] and "ask_name" in report["tools"]
    assert report["prompts"] > 0 and report["resources"] > 0
    assert report["listErrors"] == {}
    # As the gateway's server/discover announces them to 2026-07-28 clients.
    assert report["modernCapabilities"]["tools"] == {"listChanged": True}
    assert {"sessions", "discover", "resultType", "errorCodes", "inputRequired"} <= ids_of(report)
    # The era probe (refused the legacy way), then only initialize and list methods
    # went upstream, then the session was ended.
    methods = [r.method for r in records if r.http_method == "POST"]
    assert methods[:3] == ["server/discover", "initialize", "notifications/initialized"]
    assert set(methods) <= HARMLESS
    assert {"tools/list", "prompts/list", "resources/list"} <= set(methods)
    assert records[-1].http_method == "DELETE"
    assert records[-1].session_id == records[2].session_id is not None
    # Its refusal of server/discover already said it is not dual-era: nothing more sent.
    assert report["dualEra"] is False and report["eraChoices"] == []
    assert report["otherEra"] == {
        "era": "modern",
        "accepted": False,
        "protocolVersion": None,
        "reason": "it refused server/discover",
    }


def test_probe_text_report_of_the_fixture_over_http(legacy_url: str) -> None:
    done = probe(MCP_SHIM_UPSTREAM_URL=legacy_url)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "server:      mcp-shim-legacy-fixture 1.0.0" in out
    assert f"upstream:    {legacy_url} (streamable-http)" in out
    assert "protocol:    2025-11-25 (legacy; offered 2025-11-25)" in out
    assert "server/discover synthesised from initialize" in out
    assert "error codes renumbered: -32002 -> -32602 (resource not found)" in out
    tools_line = next(line for line in out.splitlines() if line.startswith("tools ("))
    assert "echo" in tools_line.split(": ", 1)[1].split(", ")


def test_probe_offers_the_configured_version(legacy_url: str) -> None:
    """MCP_SHIM_UPSTREAM_PROTOCOL_VERSION is what the gateway offers, so the probe
    offers it too; an older upstream version changes what is translated."""
    report = report_of(
        probe(
            "--json",
            MCP_SHIM_UPSTREAM_URL=legacy_url,
            MCP_SHIM_UPSTREAM_PROTOCOL_VERSION="2025-03-26",
        )
    )
    assert report["protocolVersion"] == "2025-03-26"
    asked = next(t for t in report["translations"] if t["id"] == "inputRequired")
    # 2025-03-26 has no elicitation (added in 2025-06-18).
    assert "elicitation/create" not in asked["description"]
    assert "sampling/createMessage" in asked["description"]
    steps = next(t for t in report["translations"] if t["id"] == "messages")
    assert "2025-03-26 -> 2025-06-18 -> 2025-11-25" in steps["description"]


# -- a modern (2026-07-28 only) upstream ------------------------------------------

MODERN_METHODS = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
]


@pytest.mark.parametrize("era_setting", ["auto", "modern"])
def test_probe_of_a_modern_upstream_sends_discover_and_lists_only(
    modern_url: str, era_setting: str
) -> None:
    """The modern fixture (mcp 2.x) refuses `initialize`. The probe tells its era as
    the gateway does (a `server/discover` POST; with MCP_SHIM_UPSTREAM_ERA=modern,
    none for the era, one for the report) and asks it only stateless modern
    requests, each with its `_meta` and standard headers (2026-07-28
    basic/transports/streamable-http: MCP-Protocol-Version, Mcp-Method)."""
    with RecordingProxy(modern_url) as proxy:
        done = probe("--json", MCP_SHIM_UPSTREAM_URL=proxy.url, MCP_SHIM_UPSTREAM_ERA=era_setting)
        report = report_of(done)
        records = proxy.snapshot()
    assert set(report) == REPORT_KEYS
    assert report["ok"] is True
    assert report["era"] == "modern"
    assert report["transport"] == "streamable-http"
    assert report["protocolVersion"] == report["offeredProtocolVersion"] == "2026-07-28"
    assert report["server"] == {"name": "mcp-shim-modern-fixture", "version": "1.0.0"}
    assert report["capabilities"]["tools"] == {"listChanged": True}
    assert report["capabilities"]["resources"] == {"listChanged": True, "subscribe": True}
    # Passed through to modern clients as the upstream declares them.
    assert report["modernCapabilities"] == report["capabilities"]
    assert report["instructions"] is True
    assert {"test_echo", "test_slow", "test_input_required_result_elicitation"} <= set(
        report["tools"]
    )
    assert report["prompts"] > 0 and report["resources"] > 0
    assert report["resourceTemplates"] > 0
    assert report["listErrors"] == {}
    assert ids_of(report) == {"passThrough"}
    # Then one legacy initialize, to tell a dual-era server: this one refuses it.
    *modern, handshake = records
    assert [r.method for r in modern] == MODERN_METHODS
    assert (handshake.method, handshake.body["params"]["capabilities"]) == ("initialize", {})
    assert handshake.response_headers.get("mcp-session-id") is None
    assert report["dualEra"] is False and report["eraChoices"] == []
    assert report["otherEra"]["era"] == "legacy"
    assert report["otherEra"]["reason"].startswith("upstream refused initialize")
    for record in modern:
        assert record.http_method == "POST" and record.status == 200
        meta = record.body["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
        assert record.headers["mcp-protocol-version"] == "2026-07-28"
        assert record.headers["mcp-method"] == record.method
        assert record.session_id is None


def test_probe_text_report_of_a_modern_upstream(modern_url: str) -> None:
    done = probe(MCP_SHIM_UPSTREAM_URL=modern_url)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "server:      mcp-shim-modern-fixture 1.0.0" in out
    assert f"upstream:    {modern_url} (streamable-http)" in out
    assert "protocol:    2026-07-28 (modern; offered 2026-07-28)" in out
    assert "capabilities: completions, prompts (listChanged), resources (listChanged, " in out
    tools_line = next(line for line in out.splitlines() if line.startswith("tools ("))
    assert "test_echo" in tools_line.split(": ", 1)[1].split(", ")
    assert "2026-07-28 requests passed through unchanged" in out
    assert "server/discover synthesised" not in out


@pytest.fixture(scope="module")
def dual_era_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The official Python SDK 2.x server with its own dual-era routing (the
    modern fixture with --dual-era): 2026-07-28 requests and legacy sessions
    on one endpoint."""
    log = tmp_path_factory.mktemp("dual-era") / "modern.log"
    with procs.modern_server(procs.free_port(), "--dual-era", log_path=log) as url:
        yield url


def test_probe_of_a_dual_era_upstream_says_so_and_what_each_era_gives(dual_era_url: str) -> None:
    """Served in the modern era (the gateway's choice with auto), and reported
    dual-era from one legacy initialize whose session is closed at once: no
    other request in it."""
    with RecordingProxy(dual_era_url) as proxy:
        report = report_of(probe("--json", MCP_SHIM_UPSTREAM_URL=proxy.url))
        records = proxy.snapshot()
    assert set(report) == REPORT_KEYS
    assert report["era"] == "modern" and report["protocolVersion"] == "2026-07-28"
    assert "test_echo" in report["tools"]
    assert report["dualEra"] is True
    assert report["otherEra"] == {
        "era": "legacy",
        "accepted": True,
        "protocolVersion": "2025-11-25",
        "reason": None,
    }
    modern, legacy = report["eraChoices"]
    assert (modern["era"], modern["chosen"], legacy["era"], legacy["chosen"]) == (
        "modern",
        True,
        "legacy",
        False,
    )
    assert legacy["setting"] == "MCP_SHIM_UPSTREAM_ERA=legacy"
    assert {"sessions", "inputRequired"} <= {t["id"] for t in legacy["translations"]}
    assert [r.method for r in records[: len(MODERN_METHODS)]] == MODERN_METHODS
    session = records[len(MODERN_METHODS) :]
    assert [r.method or r.http_method for r in session] == [
        "initialize",
        "notifications/initialized",
        "DELETE",
    ]
    sid = session[0].response_headers.get("mcp-session-id")
    assert sid is not None and session[2].session_id == sid
    assert session[2].status in (200, 204)


def test_probe_of_a_dual_era_upstream_forced_legacy(dual_era_url: str) -> None:
    """MCP_SHIM_UPSTREAM_ERA=legacy: the probe sees what the gateway will use
    (a legacy session), and a server/discover tells it is dual-era."""
    done = probe(MCP_SHIM_UPSTREAM_URL=dual_era_url, MCP_SHIM_UPSTREAM_ERA="legacy")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "protocol:    2025-11-25 (legacy; offered 2025-11-25)" in out
    assert "dual-era:    yes, it also speaks 2026-07-28 (modern)" in out
    assert "  legacy, MCP_SHIM_UPSTREAM_ERA=legacy (in force): the gateway's translation" in out
    assert "  modern, MCP_SHIM_UPSTREAM_ERA=auto|modern: passed through" in out
    assert "server requests (elicitation/create" in out


# -- stdio ------------------------------------------------------------------------


def test_probe_of_the_fixture_over_stdio_leaves_no_process() -> None:
    marker = f"SHIM_PROBE_MARKER={uuid.uuid4().hex}"
    done = probe("--json", MCP_SHIM_UPSTREAM_COMMAND=fixture_command("env", marker))
    report = report_of(done)
    assert report["transport"] == "stdio"
    assert report["server"]["name"] == "mcp-shim-legacy-fixture"
    assert report["protocolVersion"] == "2025-11-25"
    assert "echo" in report["tools"]
    # The probe stopped the server before it exited.
    assert processes_with(marker) == []


def test_probe_of_server_everything_over_stdio() -> None:
    command = shlex.join([str(procs.require_peer(procs.NODE)), str(procs.require_peer(EVERYTHING))])
    text = probe(MCP_SHIM_UPSTREAM_COMMAND=command)
    assert text.returncode == 0, text.stderr
    assert "server:      mcp-servers/everything" in text.stdout
    assert "(stdio)" in text.stdout
    report = report_of(probe("--json", MCP_SHIM_UPSTREAM_COMMAND=command))
    assert report["server"]["name"] == "mcp-servers/everything"
    assert report["era"] == "legacy"
    assert {"echo", "get-sum", "get-env"} <= set(report["tools"])
    assert report["prompts"] > 0 and report["resources"] > 0
    assert "tasks" in report["capabilities"]
    # Tasks left the core protocol in the 2026 revisions.
    assert "tasks" not in report["modernCapabilities"]


def published_command(server: str, tmp_path: Path) -> str:
    node = [str(procs.require_peer(procs.NODE))]
    if server == "memory":
        memory = NPM / "server-memory" / "dist" / "index.js"
        return shlex.join(
            ["env", f"MEMORY_FILE_PATH={tmp_path / 'memory.jsonl'}", *node, str(memory)]
        )
    if server == "filesystem":
        filesystem = NPM / "server-filesystem" / "dist" / "index.js"
        return shlex.join([*node, str(filesystem), str(tmp_path)])
    legacy_py = str(procs.require_peer(procs.LEGACY_PY))
    return shlex.join([legacy_py, "-m", "mcp_server_time", "--local-timezone", "UTC"])


@pytest.mark.parametrize(
    ("server", "name", "tools"),
    [
        ("memory", "memory-server", {"create_entities", "read_graph"}),
        ("filesystem", "secure-filesystem-server", {"read_text_file", "list_directory"}),
        ("time", "mcp-time", {"get_current_time", "convert_time"}),
    ],
)
def test_probe_of_other_published_stdio_servers(
    server: str, name: str, tools: set[str], tmp_path: Path
) -> None:
    """The published servers tests/integration/test_stdio.py runs behind the gateway."""
    command = published_command(server, tmp_path)
    report = report_of(probe("--json", MCP_SHIM_UPSTREAM_COMMAND=command))
    assert report["transport"] == "stdio" and report["era"] == "legacy"
    assert report["server"]["name"] == name
    assert tools <= set(report["tools"])
    assert report["listErrors"] == {}
    text = probe(MCP_SHIM_UPSTREAM_COMMAND=command)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"server:      {name} ")
    assert "protocol:    2025-11-25 (legacy; offered 2025-11-25)" in text.stdout


def test_a_reader_that_stops_early_is_no_error(legacy_url: str) -> None:
    """`mcp-shim probe | head -1`: the pipe closes before the report is written."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_SHIM_")}
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: the write fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "app.serving.cli", "probe"],
            env={**base, "MCP_SHIM_UPSTREAM_URL": legacy_url},
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            cwd=procs.ROOT,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


# -- HTTP+SSE ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def everything_sse_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("probe") / "everything-sse.log"
    with everything_sse(procs.free_port(), log) as url:
        yield url


@pytest.mark.parametrize("mode", ["auto", "sse"])
def test_probe_of_server_everything_over_http_sse(everything_sse_url: str, mode: str) -> None:
    started = time.monotonic()
    report = report_of(
        probe(
            "--json",
            MCP_SHIM_UPSTREAM_URL=everything_sse_url,
            MCP_SHIM_UPSTREAM_TRANSPORT=mode,
        )
    )
    assert report["transport"] == "sse"
    assert report["server"]["name"] == "mcp-servers/everything"
    assert report["era"] == "legacy"
    assert {"echo", "get-sum"} <= set(report["tools"])
    assert time.monotonic() - started < 30
    text = probe(MCP_SHIM_UPSTREAM_URL=everything_sse_url, MCP_SHIM_UPSTREAM_TRANSPORT=mode)
    assert text.returncode == 0, text.stderr
    assert "server:      mcp-servers/everything" in text.stdout
    assert f"upstream:    {everything_sse_url} (sse)" in text.stdout


# -- failures -----------------------------------------------------------------------


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mcp-shim probe: ")
    return lines[0]


def test_nothing_listening() -> None:
    url = f"http://127.0.0.1:{procs.free_port()}/mcp"
    done = probe(MCP_SHIM_UPSTREAM_URL=url)
    assert done.returncode == 3
    assert done.stdout == ""
    line = one_line(done)
    assert "unreachable" in line and "Connection refused" in line
    machine = probe("--json", MCP_SHIM_UPSTREAM_URL=url)
    assert machine.returncode == 3
    assert json.loads(machine.stdout) == {
        "shape": 1,
        "ok": False,
        "exitCode": 3,
        "reason": line.removeprefix("mcp-shim probe: "),
        "upstream": url,
        # Not detected: the configured MCP_SHIM_UPSTREAM_TRANSPORT.
        "transport": "auto",
    }


def test_an_http_error_is_a_refusal(legacy_url: str) -> None:
    """The fixture's /nowhere: POST 404, then GET 404 too; both are named."""
    done = probe(MCP_SHIM_UPSTREAM_URL=legacy_url.removesuffix("/mcp") + "/nowhere")
    assert done.returncode == 4
    line = one_line(done)
    assert "refused: upstream refused initialize with HTTP 404" in line
    assert "no HTTP+SSE stream either (upstream answered the SSE GET with HTTP 404)" in line


def test_a_command_that_exits_at_once() -> None:
    command = "sh -c 'echo \"fatal: SERVICE_TOKEN is not set\" >&2; exit 3'"
    done = probe(MCP_SHIM_UPSTREAM_COMMAND=command)
    assert done.returncode == 6
    line = one_line(done)
    assert "exited with code 3 during initialize" in line
    assert "stderr: fatal: SERVICE_TOKEN is not set" in line


def test_a_command_that_never_answers_times_out() -> None:
    marker = f"SHIM_PROBE_MARKER={uuid.uuid4().hex}"
    started = time.monotonic()
    done = probe(
        MCP_SHIM_UPSTREAM_COMMAND=f"env {marker} sleep 30", MCP_SHIM_STDIO_START_TIMEOUT_S="1"
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 5
    assert "timed out" in one_line(done) and "MCP_SHIM_STDIO_START_TIMEOUT_S" in done.stderr
    assert elapsed < 20
    assert processes_with(marker) == []


def test_the_probe_timeout_bounds_the_whole_probe() -> None:
    done = probe("--timeout", "1", MCP_SHIM_UPSTREAM_COMMAND="sleep 30")
    assert done.returncode == 5
    assert "timed out after 1s waiting for initialize (--timeout)" in one_line(done)


def test_invalid_configuration() -> None:
    done = probe()
    assert done.returncode == 2
    assert "MCP_SHIM_UPSTREAM_URL" in done.stderr and "MCP_SHIM_UPSTREAM_COMMAND" in done.stderr
