"""A member's answer to a call sent straight to its route (direct.py), renamed
on its way to the client as the aggregate's endpoint renames it (answers.py):
sealed `requestState` and task ids, resource URIs shown as the aggregate shows
them, log messages naming the member.

A JSON answer is read whole and written in one piece; an event stream is
passed on event by event, each event renamed. Bytes that hold none of the
values answers.py renames pass as they are, unparsed.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Final

from starlette.types import Send

from app import jsonio
from app.call import Message
from app.cluster.sealing import Sealer
from app.connection.link import ConnectionLink
from app.servers.aggregate import answers
from app.servers.aggregate.aggregator import unreachable_message
from app.servers.aggregate.uris import Owners

_FRAMING: Final = frozenset({b"content-length", b"transfer-encoding"})


def may_rename(body: bytes) -> bool:
    """Whether a result's bytes may hold what answers.py `result` renames:
    sealed values and resource URIs (a false positive only costs a parse;
    each test a memchr-speed scan, whatever the answer's size)."""
    return b'"requestState"' in body or b'"taskId"' in body or b'"resource' in body


class Renamer:
    """One call's answer messages as the aggregate shows them."""

    def __init__(
        self,
        sealer: Sealer,
        member: str,
        owners: Owners,
        method: str,
        *,
        server_requests: bool = False,
    ) -> None:
        self._scope = answers.Scope(sealer, member, owners)
        self._member = member
        self._method = method
        # A legacy session's answer may carry the member's requests to the
        # client: their ids made the aggregate's (`server_request_id`).
        self._server_requests = server_requests
        self._events = bytearray()

    def message(self, message: Message) -> Message | None:
        """One message renamed; the same object when nothing changes; None
        when it is the aggregate's own business (answers.notification)."""
        try:
            if "method" in message and "id" in message:
                if not self._server_requests:
                    return message
                return {**message, "id": server_request_id(self._member, message["id"])}
            if "method" in message:
                note = answers.notification(self._scope, message)
                return None if note is None else (message if note is message else dict(note))
            result = message.get("result")
            if isinstance(result, dict):
                out = answers.result(self._scope, self._method, result)
                return message if out is result else {**message, "result": out}
        except answers.TooLong as exc:
            # The answer's id is the call's.
            return unreachable_message(self._member, self._method, message.get("id"), exc)
        return message

    def body(self, body: bytes) -> bytes:
        """A JSON answer's bytes renamed."""
        if not may_rename(body):
            return body
        try:
            message = jsonio.loads(body)
        except jsonio.JSONDecodeError:
            return body
        if not isinstance(message, dict):
            return body
        out = self.message(message)
        return body if out is message or out is None else jsonio.dumps(out)

    def events(self, chunk: bytes, last: bool) -> bytes:
        """The whole events of the stream so far, each renamed; a partial
        event kept for the next chunk (all of it at the stream's end)."""
        self._events += chunk
        end = self._events.rfind(b"\n\n")
        if end < 0 and not last:
            return b""
        cut = len(self._events) if last else end + 2
        whole = bytes(self._events[:cut])
        del self._events[:cut]
        return b"".join(self._event(e) for e in whole.split(b"\n\n") if e)

    def _event(self, event: bytes) -> bytes:
        lines = event.split(b"\n")
        data = [line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:")]
        if not data:
            return event + b"\n\n"
        try:
            message = jsonio.loads(b"\n".join(data))
        except jsonio.JSONDecodeError:
            return event + b"\n\n"
        if not isinstance(message, dict):
            return event + b"\n\n"
        out = self.message(message)
        if out is message:
            return event + b"\n\n"
        if out is None:
            return b""
        kept = [line for line in lines if not line.startswith(b"data:")]
        return b"\n".join([*kept, b"data: " + jsonio.dumps(out)]) + b"\n\n"


# A member's request to a legacy client, as the aggregate sends it: the
# member's name and its own id, so the client's answer finds both.
SERVER_REQUEST: Final = "mcp-shim:"


def server_request_id(member: str, request_id: Any) -> str:
    return f"{SERVER_REQUEST}{member}:{jsonio.dumps(request_id).decode()}"


def opened_request_id(value: Any) -> tuple[str, Any] | None:
    """(member, its own id) of an id `server_request_id` made; None: not one."""
    if not isinstance(value, str) or not value.startswith(SERVER_REQUEST):
        return None
    member, colon, rest = value[len(SERVER_REQUEST) :].partition(":")
    try:
        own = jsonio.loads(rest) if colon and member else None
    except jsonio.JSONDecodeError:
        return None
    return (member, own) if isinstance(own, str | int) and not isinstance(own, bool) else None


class RenamingSend:
    """The member's ASGI `send`, renaming on the way to the client's: a JSON
    answer written whole on the client's connection when it can be."""

    def __init__(self, renamer: Renamer, link: ConnectionLink, send: Send) -> None:
        self._renamer = renamer
        self._link = link
        self._send = send
        self._start: MutableMapping[str, Any] | None = None
        self._mode = ""  # "json", "sse" or "" (passed as it is)
        self._body = bytearray()

    async def __call__(self, event: MutableMapping[str, Any]) -> None:
        kind = event["type"]
        if kind == "http.response.start":
            content_type = _header(event.get("headers", ()), b"content-type")
            if content_type.startswith(b"application/json"):
                self._start, self._mode = event, "json"
                return
            if content_type.startswith(b"text/event-stream"):
                self._mode = "sse"
            await self._send(event)
            return
        if kind != "http.response.body" or not self._mode:
            await self._send(event)
            return
        more = bool(event.get("more_body", False))
        if self._mode == "json":
            self._body += event.get("body", b"")
            if not more:
                await self._json()
            return
        out = self._renamer.events(event.get("body", b""), not more)
        if out or not more:
            await self._send({"type": "http.response.body", "body": out, "more_body": more})

    async def _json(self) -> None:
        start = self._start
        assert start is not None
        renamed = self._renamer.body(bytes(self._body))
        headers = [(k, v) for k, v in start.get("headers", ()) if k.lower() not in _FRAMING]
        # `headers` hold the member's request id and CORS ones; `renamed` is renamed.
        self._link.answer_headers, self._link.rewrite = (), None
        if self._link.write_whole(start["status"], headers, renamed):
            return
        self._link.answer_headers = None
        headers.append((b"content-length", str(len(renamed)).encode()))
        await self._send(
            {"type": "http.response.start", "status": start["status"], "headers": headers}
        )
        await self._send({"type": "http.response.body", "body": renamed, "more_body": False})


def _header(headers: Any, name: bytes) -> bytes:
    for key, value in headers:
        if key.lower() == name:
            return bytes(value).lower()
    return b""
