"""Fixed upstream headers (MCP_SHIM_UPSTREAM_HEADERS): parsed with errors a
person can act on (never quoting a value), secrets read from files, masked
by `mcp-shim config`, and sent by the upstream client on every request
whichever method sends it, a fixed Authorization replacing the caller's."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.config import SettingsError
from app.settings import command
from app.settings.headers import MAX_HEADERS, fixed_headers, has_authorization
from app.settings.load import load_settings
from app.upstream.httpclient.client import build_client
from tests.unit.http_peer import LoopbackPeer, read_request

SECRET = "s3cr3t-value"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("MCP_SHIM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_URL", "http://127.0.0.1:3001/mcp")


def _refused(raw: object) -> str:
    with pytest.raises(SettingsError) as caught:
        fixed_headers(raw, "MCP_SHIM_UPSTREAM_HEADERS")
    assert SECRET not in str(caught.value)
    return str(caught.value)


def test_strings_objects_and_files(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(f"Bearer {SECRET}\n", encoding="utf-8")
    assert fixed_headers(
        f'{{"Authorization": {{"file": "{token}"}}, "X-Tenant": "acme"}}', "here"
    ) == {"Authorization": f"Bearer {SECRET}", "X-Tenant": "acme"}
    # A mapping already parsed (a TOML table, a servers file's entry) too.
    assert fixed_headers({"X-Api-Key": SECRET}, "here") == {"X-Api-Key": SECRET}
    assert fixed_headers("", "here") == {} and fixed_headers("  ", "here") == {}
    assert has_authorization({"authorization": "x"}) and not has_authorization({"X-A": "x"})


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (f"Authorization: Bearer {SECRET}", "reads like a header line 'Authorization:'"),
        ("{nope", "is not JSON (line 1, column 2"),
        ('["Authorization"]', "is a JSON array, not an object"),
        ('"Bearer x"', "is a JSON string, not an object"),
        ('{"Bad Name": "x"}', "'Bad Name' is not a header name"),
        ('{"X-A": "1", "x-a": "2"}', "'x-a' and 'X-A' are the same header"),
        ('{"Mcp-Session-Id": "x"}', "'Mcp-Session-Id' is written by the gateway"),
        ('{"Content-Type": "text/plain"}', "'Content-Type' is written by the gateway"),
        ('{"Host": "h"}', "'Host' is written by the gateway"),
        ('{"X-A": 3}', "the value of 'X-A' is a number; write a string"),
        ('{"X-A": {"path": "/x"}}', 'is an object other than {"file": "/path"}'),
        ('{"X-A": ""}', "the value of 'X-A' is empty"),
        (f'{{"X-A": "{SECRET}\\r\\nX-B: 1"}}', "holds a line break"),
        (f'{{"X-A": "{SECRET}é"}}', "beyond ASCII"),
        ('{"X-A": "' + "a" * 9000 + '"}', "longer than 8192 characters"),
        ({f"X-{n}": "v" for n in range(MAX_HEADERS + 1)}, f"at most {MAX_HEADERS}"),
    ],
)
def test_faults_say_what_to_write_and_never_quote_a_value(raw: object, says: str) -> None:
    message = _refused(raw)
    assert says in message, message
    assert message.startswith("MCP_SHIM_UPSTREAM_HEADERS")


def test_secret_files(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    assert f"the file '{missing}' of 'Authorization' cannot be read: No such file" in _refused(
        {"Authorization": {"file": str(missing)}}
    )
    empty = tmp_path / "empty"
    empty.write_text("\n", encoding="utf-8")
    assert "is empty" in _refused({"X-A": {"file": str(empty)}})
    crlf = tmp_path / "crlf"
    crlf.write_bytes(SECRET.encode() + b"\r\n")
    assert fixed_headers({"X-A": {"file": str(crlf)}}, "w") == {"X-A": SECRET}
    two_lines = tmp_path / "two"
    two_lines.write_text(f"{SECRET}\nmore\n", encoding="utf-8")
    assert "holds a line break" in _refused({"X-A": {"file": str(two_lines)}})


def test_loaded_from_the_environment_and_masked_by_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = tmp_path / "token"
    token.write_text(SECRET, encoding="utf-8")
    monkeypatch.setenv(
        "MCP_SHIM_UPSTREAM_HEADERS",
        f'{{"Authorization": {{"file": "{token}"}}, "X-Tenant": "{SECRET}"}}',
    )
    settings = load_settings()
    assert settings.fixed_upstream_headers() == {"Authorization": SECRET, "X-Tenant": SECRET}
    assert SECRET not in repr(settings) and SECRET not in str(settings)
    table = command.rows(settings, set(), {"MCP_SHIM_UPSTREAM_HEADERS"})
    row = next(row for row in table if row.variable == "MCP_SHIM_UPSTREAM_HEADERS")
    assert row.value == {"Authorization": "(set, hidden)", "X-Tenant": "(set, hidden)"}
    assert row.source == "environment"
    printed = command.render(table) + command.as_json(table)
    assert SECRET not in printed and "X-Tenant" in printed


def test_a_bad_value_is_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_HEADERS", "[1]")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    lines = str(caught.value).splitlines()[1:]
    assert len(lines) == 1 and "is a JSON array" in lines[0]


def test_not_with_a_stdio_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_SHIM_UPSTREAM_URL")
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_COMMAND", "sh -c true")
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_HEADERS", '{"X-A": "1"}')
    with pytest.raises(
        SettingsError, match="MCP_SHIM_UPSTREAM_HEADERS applies to MCP_SHIM_UPSTREAM_URL"
    ):
        load_settings()


# -- the upstream client sends them on every request --------------------------------


class Recorder(LoopbackPeer):
    """Answers every request 200 with `{}`, keeping each request's head."""

    def __init__(self) -> None:
        self.heads: list[dict[str, list[str]]] = []

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head, _body = await read_request(reader)
                fields: dict[str, list[str]] = {}
                for line in head.decode().split("\r\n")[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        fields.setdefault(name.strip().lower(), []).append(value.strip())
                self.heads.append(fields)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 2\r\n\r\n{}"
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    peer = Recorder()
    await peer.start()
    yield peer
    assert peer.server is not None
    peer.server.close()


@pytest.mark.parametrize("transport", ["h1", "aiohttp"])
@pytest.mark.parametrize(
    "fixed", [{"Authorization": "Bearer gateway", "X-Tenant": "acme"}, {"X-Tenant": "acme"}]
)
async def test_every_method_sends_the_fixed_headers(
    recorder: Recorder, transport: str, fixed: dict[str, str]
) -> None:
    url = httpx.URL(recorder.url)
    timeout = httpx.Timeout(5.0)
    caller = {"authorization": "Bearer client", "content-type": "application/json"}
    client = build_client(
        connect_timeout_s=5.0, max_connections=4, transport=transport, fixed_headers=fixed
    )
    async with client:
        answer = await client.poster(url, caller, timeout)(
            b"{}", {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
        )
        await answer.aread()
        await answer.aclose()
        answer = await client.one_off(b"DELETE", url, caller, b"", timeout)
        await answer.aread()
        await answer.aclose()
        answer = await client.open_get(url, caller, timeout)
        await answer.aread()
        await answer.aclose()
        answer = await client.open_stream("POST", url, caller, b"{}", timeout)
        await answer.aread()
        await answer.aclose()
    assert len(recorder.heads) == 4
    expected = "Bearer gateway" if "Authorization" in fixed else "Bearer client"
    for head in recorder.heads:
        assert head["x-tenant"] == ["acme"]
        # One Authorization, never the caller's beside a fixed one.
        assert head["authorization"] == [expected]


async def test_without_fixed_headers_the_callers_pass_as_they_are(recorder: Recorder) -> None:
    async with build_client(connect_timeout_s=5.0, max_connections=4) as client:
        answer = await client.one_off(
            b"POST",
            httpx.URL(recorder.url),
            {"Authorization": "Bearer client"},
            b"{}",
            httpx.Timeout(5.0),
        )
        await answer.aread()
        await answer.aclose()
    assert recorder.heads[0]["authorization"] == ["Bearer client"]
    assert "x-tenant" not in recorder.heads[0]
