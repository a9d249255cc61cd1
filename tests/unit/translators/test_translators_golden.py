"""Golden cases for translators.translate, as tables.

Each row is ``(name, src, dst, input, expected, lossy, ctx)``:

* the row's translation ``src -> dst`` of ``input`` must equal ``expected``;
* when ``lossy`` is None the translation is reversible and ``dst -> src`` of
  ``expected`` must give ``input`` back; otherwise ``lossy`` says what is lost
  and only the forward direction is checked;
* every input and output is validated against the schema.json of its version
  (the draft has no published schema and is checked by value only);
* no input is ever mutated.

Inputs come from the spec's own examples (``2026-07-28/schema-examples``)
wherever one exists.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from tests.schema import MODERN_ERROR_DEFS, RESULT_DEFS
from tests.unit.conftest import Spec, load_example
from translators import translate
from translators.registry import Version, get_version, known_versions
from translators.translate import Context

M = "2026-07-28"
D = "DRAFT-2026-v1"
L4 = "2024-11-05"
L3 = "2025-03-26"
L6 = "2025-06-18"
L11 = "2025-11-25"

PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/clientInfo"
LOG = "io.modelcontextprotocol/logLevel"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
SUB_ID = "io.modelcontextprotocol/subscriptionId"

EXAMPLE_CLIENT = {"name": "ExampleClient", "version": "1.0.0"}
EXAMPLE_SERVER = {"name": "ExampleServer", "version": "1.0.0"}
DEFAULT = Context()


def v(name: str) -> Version:
    version = get_version(name)
    assert version is not None, name
    return version


def ex(type_name: str, file: str) -> dict[str, Any]:
    return load_example(type_name, file)


def drop(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: val for k, val in obj.items() if k not in keys}


def rpc(method: str, params: dict[str, Any] | None = None, rid: Any = 1) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def note(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


class Golden(NamedTuple):
    name: str
    src: str
    dst: str
    input: Any
    expected: Any
    lossy: str | None = None  # None: reversible
    ctx: Context = DEFAULT


def ids(rows: list[Golden]) -> list[str]:
    return [r.name for r in rows]


# ---------------------------------------------------------------------------
# Schema validation per kind of message
# ---------------------------------------------------------------------------


def check_request(spec: Spec, version: str, msg: dict[str, Any]) -> None:
    if not spec.has_schema(version):
        return
    definition = spec.method_definition(version, msg["method"], "Request")
    assert definition is not None, f"{msg['method']} does not exist in {version}"
    spec.validate(version, definition, msg)
    if "id" in msg:
        spec.validate(version, "JSONRPCRequest", msg)


def check_result(spec: Spec, version: str, method: str, res: dict[str, Any]) -> None:
    if spec.has_schema(version):
        spec.validate(version, RESULT_DEFS[method], res)


def check_notification(spec: Spec, version: str, msg: dict[str, Any] | None) -> None:
    if msg is None or not spec.has_schema(version):
        return
    definition = spec.method_definition(version, msg["method"], "Notification")
    if definition is not None:  # vendor notifications have none
        spec.validate(version, definition, msg)
    spec.validate(version, "JSONRPCNotification", msg)


def check_error(spec: Spec, version: str, err: dict[str, Any]) -> None:
    if not spec.has_schema(version):
        return
    response = {"jsonrpc": "2.0", "id": 1, "error": err}
    defs = spec.definitions(version)
    spec.validate(
        version,
        "JSONRPCErrorResponse" if "JSONRPCErrorResponse" in defs else "JSONRPCError",
        response,
    )
    if version == M and err["code"] in MODERN_ERROR_DEFS:
        definition, whole = MODERN_ERROR_DEFS[err["code"]]
        spec.validate(version, definition, response if whole else err)
    if version == L11 and err["code"] == -32042:
        spec.validate(version, "URLElicitationRequiredError", response)


def check_caps(spec: Spec, version: str, definition: str, caps: dict[str, Any]) -> None:
    if spec.has_schema(version):
        spec.validate(version, definition, caps)


def run_golden(
    row: Golden,
    translate_fn: Callable[[Any, Version, Version, Context], Any],
    check: Callable[[str, Any], None],
) -> None:
    src, dst = v(row.src), v(row.dst)
    check(row.src, row.input)
    check(row.dst, row.expected)
    before = copy.deepcopy(row.input)
    out = translate_fn(row.input, src, dst, row.ctx)
    assert row.input == before, "input was mutated"
    assert out == row.expected
    if row.lossy is None:
        before = copy.deepcopy(row.expected)
        back = translate_fn(row.expected, dst, src, row.ctx)
        assert row.expected == before, "input was mutated"
        assert back == row.input, "not reversible"


# ---------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------

_call_tool = ex("CallToolRequest", "call-tool-request")
_read_resource = ex("ReadResourceRequest", "read-resource-request")
_complete = ex("CompleteRequest", "completion-request")
_example_ctx = Context(client_capabilities={}, client_info=EXAMPLE_CLIENT)

REQUESTS: list[Golden] = [
    Golden(
        "tools/call example <-> 2025-11-25",
        M,
        L11,
        _call_tool,
        drop(_call_tool, "params") | {"params": drop(_call_tool["params"], "_meta")},
        ctx=_example_ctx,
    ),
    Golden(
        "resources/read example <-> 2025-06-18",
        M,
        L6,
        _read_resource,
        drop(_read_resource, "params") | {"params": {"uri": "file:///project/src/main.rs"}},
        ctx=_example_ctx,
    ),
    Golden(
        "completion/complete example <-> 2025-06-18 (context-free)",
        M,
        L6,
        _complete,
        drop(_complete, "params") | {"params": drop(_complete["params"], "_meta")},
        ctx=_example_ctx,
    ),
    Golden(
        "tools/list keeps progressToken and traceparent, moves logLevel and capabilities",
        M,
        L11,
        rpc(
            "tools/list",
            {
                "_meta": {
                    PV: M,
                    CAPS: {"elicitation": {"form": {}}, "sampling": {"tools": {}}},
                    LOG: "warning",
                    "progressToken": 7,
                    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                },
                "cursor": "page-2",
            },
        ),
        rpc(
            "tools/list",
            {
                "_meta": {
                    "progressToken": 7,
                    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                },
                "cursor": "page-2",
            },
        ),
        ctx=Context(
            client_capabilities={"elicitation": {"form": {}}, "sampling": {"tools": {}}},
            log_level="warning",
        ),
    ),
    Golden(
        "tools/list without params <-> 2024-11-05 (five steps; no clientInfo invented)",
        M,
        L4,
        rpc("tools/list", {"_meta": {PV: M, CAPS: {}}}),
        rpc("tools/list"),
        ctx=Context(client_capabilities={}),
    ),
    Golden(
        "legacy capabilities are upgraded on the way into _meta",
        L11,
        M,
        rpc("prompts/list"),
        rpc("prompts/list", {"_meta": {PV: M, CAPS: {"roots": {}}, INFO: EXAMPLE_CLIENT}}),
        lossy="roots.listChanged and tasks have no 2026 form",
        ctx=Context(
            client_capabilities={"roots": {"listChanged": True}, "tasks": {"list": {}}},
            client_info=EXAMPLE_CLIENT,
        ),
    ),
    Golden(
        "MRTR retry fields removed toward legacy",
        M,
        L11,
        rpc(
            "tools/call",
            {
                "_meta": {PV: M, CAPS: {"elicitation": {}}},
                "name": "deploy",
                "arguments": {"env": "prod"},
                "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
                "requestState": "opaque-state",
            },
            rid=2,
        ),
        rpc("tools/call", {"name": "deploy", "arguments": {"env": "prod"}}, rid=2),
        lossy="inputResponses/requestState are answered by the gateway, not forwarded",
    ),
    Golden(
        "task augmentation dropped toward modern",
        L11,
        M,
        rpc("tools/call", {"name": "slow", "arguments": {}, "task": {"ttl": 60000}}),
        rpc("tools/call", {"_meta": {PV: M, CAPS: {}}, "name": "slow", "arguments": {}}),
        lossy="tasks left the core protocol in 2026",
        ctx=Context(client_capabilities={}),
    ),
    Golden(
        "draft <-> 2026-07-28: protocolVersion renamed, clientInfo kept",
        D,
        M,
        rpc("tools/call", {"_meta": {PV: D, CAPS: {}, INFO: EXAMPLE_CLIENT}, "name": "x"}),
        rpc("tools/call", {"_meta": {PV: M, CAPS: {}, INFO: EXAMPLE_CLIENT}, "name": "x"}),
    ),
    Golden(
        "2026-07-28 -> draft fills the draft's required clientInfo",
        M,
        D,
        rpc("server/discover", {"_meta": {PV: M, CAPS: {}}}),
        rpc("server/discover", {"_meta": {PV: D, CAPS: {}, INFO: {"name": "gw", "version": "1"}}}),
        lossy="the filled-in clientInfo is kept going back (optional in 2026)",
        ctx=Context(client_info={"name": "gw", "version": "1"}),
    ),
    Golden(
        "completion/complete context dropped toward 2025-03-26",
        L6,
        L3,
        rpc(
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "code_review"},
                "argument": {"name": "framework", "value": "fla"},
                "context": {"arguments": {"language": "python"}},
            },
        ),
        rpc(
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "code_review"},
                "argument": {"name": "framework", "value": "fla"},
            },
        ),
        lossy="2025-03-26 has no completion context",
    ),
    Golden(
        "initialize capabilities follow the chain (2025-11-25 -> 2025-03-26)",
        L11,
        L3,
        rpc(
            "initialize",
            {
                "protocolVersion": L11,
                "capabilities": {
                    "elicitation": {"form": {}},
                    "sampling": {"tools": {}},
                    "tasks": {"list": {}},
                    "roots": {"listChanged": True},
                },
                "clientInfo": {"name": "c", "version": "1"},
            },
        ),
        rpc(
            "initialize",
            {
                "protocolVersion": L11,
                "capabilities": {"sampling": {}, "roots": {"listChanged": True}},
                "clientInfo": {"name": "c", "version": "1"},
            },
        ),
        lossy="elicitation, tasks and sampling tools do not exist in 2025-03-26",
    ),
    # Server-initiated requests (they become InputRequests toward modern clients).
    # (An InputRequest has no jsonrpc/id in 2026; the caller adds the envelope.)
    Golden(
        "sampling/createMessage example <-> 2025-11-25",
        M,
        L11,
        rpc("sampling/createMessage", ex("CreateMessageRequest", "sampling-request")["params"]),
        rpc("sampling/createMessage", ex("CreateMessageRequest", "sampling-request")["params"]),
    ),
    Golden(
        "elicitation/create example (form) <-> 2025-11-25",
        M,
        L11,
        rpc("elicitation/create", ex("ElicitRequest", "elicitation-request")["params"]),
        rpc("elicitation/create", ex("ElicitRequest", "elicitation-request")["params"]),
    ),
    Golden(
        "URL elicitation loses elicitationId and task toward modern",
        L11,
        M,
        rpc(
            "elicitation/create",
            {
                "mode": "url",
                "message": "Sign in",
                "url": "https://example.com/login",
                "elicitationId": "e-1",
                "task": {"ttl": 1000},
            },
        ),
        rpc(
            "elicitation/create",
            {"mode": "url", "message": "Sign in", "url": "https://example.com/login"},
        ),
        lossy="2026-07-28 removed elicitationId (changelog minor 11) and tasks",
    ),
    Golden(
        "form elicitation loses mode toward 2025-06-18",
        L11,
        L6,
        rpc("elicitation/create", drop(ex("ElicitRequest", "elicitation-request")["params"])),
        rpc(
            "elicitation/create",
            drop(ex("ElicitRequest", "elicitation-request")["params"], "mode"),
        ),
        lossy="2025-06-18 elicitation has no mode (form is implied)",
    ),
    Golden(
        "sampling tools dropped toward 2025-06-18",
        L11,
        L6,
        rpc(
            "sampling/createMessage",
            {
                "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                "maxTokens": 10,
                "tools": [{"name": "t", "inputSchema": {"type": "object"}}],
                "toolChoice": {"mode": "auto"},
            },
        ),
        rpc(
            "sampling/createMessage",
            {
                "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                "maxTokens": 10,
            },
        ),
        lossy="tool use in sampling is 2025-11-25+",
    ),
]


@pytest.mark.parametrize("row", REQUESTS, ids=ids(REQUESTS))
def test_request_golden(row: Golden, spec: Spec) -> None:
    run_golden(row, translate.request, lambda ver, msg: check_request(spec, ver, msg))


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------


class GoldenResult(NamedTuple):
    name: str
    method: str
    src: str
    dst: str
    input: Any
    expected: Any
    lossy: str | None = None
    ctx: Context = DEFAULT


_structured = ex("CallToolResult", "result-with-structured-content")
_array_structured = ex("CallToolResult", "result-with-array-structured-content")
_unstructured = ex("CallToolResult", "result-with-unstructured-text")
_tool_error = ex("CallToolResult", "invalid-tool-input-error")
_read = ex("ReadResourceResult", "file-resource-contents")
_tools = ex("ListToolsResult", "tools-list-with-cursor-and-ttl")
_prompts = ex("ListPromptsResult", "prompts-list-with-cursor-and-ttl")
_resources = ex("ListResourcesResult", "resources-list-with-cursor-and-ttl")
_templates = ex("ListResourceTemplatesResult", "resource-templates-list-with-cursor-and-ttl")
_prompt = ex("GetPromptResult", "code-review-prompt")
_completion = ex("CompleteResult", "single-completion-value")
_discover = ex("DiscoverResult", "server-capabilities-discovery")

CACHE = ("resultType", "ttlMs", "cacheScope")


def _ctx_of(result: dict[str, Any]) -> Context:
    return Context(ttl_ms=result["ttlMs"], cache_scope=result["cacheScope"])


def _strip_items(res: dict[str, Any], key: str, *fields: str) -> dict[str, Any]:
    return res | {key: [drop(item, *fields) for item in res[key]]}


RESULTS: list[GoldenResult] = [
    GoldenResult(
        "CallToolResult structured <-> 2025-11-25",
        "tools/call",
        M,
        L11,
        _structured,
        drop(_structured, "resultType"),
    ),
    GoldenResult(
        "CallToolResult text <-> 2025-03-26",
        "tools/call",
        M,
        L3,
        _unstructured,
        drop(_unstructured, "resultType"),
    ),
    GoldenResult(
        "CallToolResult isError <-> 2024-11-05",
        "tools/call",
        M,
        L4,
        _tool_error,
        drop(_tool_error, "resultType"),
    ),
    GoldenResult(
        "CallToolResult array structuredContent -> 2025-11-25",
        "tools/call",
        M,
        L11,
        _array_structured,
        drop(_array_structured, "resultType", "structuredContent"),
        lossy="2025-11-25 structuredContent must be an object; the text content stays",
    ),
    GoldenResult(
        "CallToolResult structured -> 2025-03-26",
        "tools/call",
        M,
        L3,
        _structured,
        drop(_structured, "resultType", "structuredContent"),
        lossy="structuredContent is 2025-06-18+",
    ),
    GoldenResult(
        "ReadResourceResult <-> 2025-11-25 (ttlMs/cacheScope from Context)",
        "resources/read",
        M,
        L11,
        _read,
        drop(_read, *CACHE),
        ctx=_ctx_of(_read),
    ),
    GoldenResult(
        "ListToolsResult <-> 2025-11-25",
        "tools/list",
        M,
        L11,
        _tools,
        drop(_tools, *CACHE),
        ctx=_ctx_of(_tools),
    ),
    GoldenResult(
        "ListToolsResult -> 2025-06-18 (icons)",
        "tools/list",
        M,
        L6,
        _tools,
        _strip_items(drop(_tools, *CACHE), "tools", "icons"),
        lossy="icons are 2025-11-25+",
    ),
    GoldenResult(
        "ListToolsResult -> 2025-03-26 (icons, title)",
        "tools/list",
        M,
        L3,
        _tools,
        _strip_items(drop(_tools, *CACHE), "tools", "icons", "title"),
        lossy="titles are 2025-06-18+",
    ),
    GoldenResult(
        "ListPromptsResult <-> 2025-11-25",
        "prompts/list",
        M,
        L11,
        _prompts,
        drop(_prompts, *CACHE),
        ctx=_ctx_of(_prompts),
    ),
    GoldenResult(
        "ListResourcesResult <-> 2025-11-25",
        "resources/list",
        M,
        L11,
        _resources,
        drop(_resources, *CACHE),
        ctx=_ctx_of(_resources),
    ),
    GoldenResult(
        "ListResourceTemplatesResult -> 2025-03-26",
        "resources/templates/list",
        M,
        L3,
        _templates,
        _strip_items(drop(_templates, *CACHE), "resourceTemplates", "icons", "title"),
        lossy="icons and titles are newer than 2025-03-26",
    ),
    GoldenResult(
        "GetPromptResult <-> 2025-06-18", "prompts/get", M, L6, _prompt, drop(_prompt, "resultType")
    ),
    GoldenResult(
        "CompleteResult <-> 2025-03-26",
        "completion/complete",
        M,
        L3,
        _completion,
        drop(_completion, "resultType"),
    ),
    GoldenResult(
        "serverInfo in result _meta toward modern (Context.server_info)",
        "tools/call",
        L11,
        M,
        drop(_unstructured, "resultType"),
        _unstructured | {"_meta": {SERVER_INFO: EXAMPLE_SERVER}},
        ctx=Context(server_info=EXAMPLE_SERVER),
    ),
    GoldenResult(
        "legacy list result gets default caching hints",
        "prompts/list",
        L6,
        M,
        {"prompts": [{"name": "p"}]},
        {
            "prompts": [{"name": "p"}],
            "resultType": "complete",
            "ttlMs": 60000,
            "cacheScope": "private",
        },
    ),
    GoldenResult(
        "upstream hints are kept, not overwritten",
        "resources/read",
        D,
        M,
        drop(_read, "ttlMs") | {"ttlMs": 5, "cacheScope": "public"},
        drop(_read, "ttlMs") | {"ttlMs": 5, "cacheScope": "public"},
        ctx=Context(ttl_ms=99, cache_scope="private"),
    ),
    GoldenResult(
        "no hints on a retried MRTR result (Context.cache_hints=False)",
        "resources/read",
        L11,
        M,
        drop(_read, *CACHE),
        drop(_read, "ttlMs", "cacheScope"),
        lossy="checked by value only: 2026 ReadResourceResult requires the hints",
        ctx=Context(cache_hints=False),
    ),
    GoldenResult(
        "DiscoverResult <-> draft (serverInfo top-level, not cacheable)",
        "server/discover",
        M,
        D,
        _discover,
        drop(_discover, "_meta", "ttlMs", "cacheScope") | {"serverInfo": EXAMPLE_SERVER},
        ctx=_ctx_of(_discover),
    ),
    GoldenResult(
        "tool execution (tasks) dropped toward modern",
        "tools/list",
        L11,
        M,
        {
            "tools": [
                {
                    "name": "t",
                    "inputSchema": {"type": "object"},
                    "execution": {"taskSupport": "optional"},
                }
            ]
        },
        {
            "tools": [{"name": "t", "inputSchema": {"type": "object"}}],
            "resultType": "complete",
            "ttlMs": 60000,
            "cacheScope": "private",
        },
        lossy="tasks left the core protocol",
    ),
    GoldenResult(
        "non-object outputSchema dropped toward legacy",
        "tools/list",
        M,
        L11,
        {
            "resultType": "complete",
            "ttlMs": 0,
            "cacheScope": "public",
            "tools": [
                {"name": "a", "inputSchema": {"type": "object"}, "outputSchema": {"type": "array"}},
                {
                    "name": "b",
                    "inputSchema": {"type": "object"},
                    "outputSchema": {"type": "object"},
                },
            ],
        },
        {
            "tools": [
                {"name": "a", "inputSchema": {"type": "object"}},
                {
                    "name": "b",
                    "inputSchema": {"type": "object"},
                    "outputSchema": {"type": "object"},
                },
            ]
        },
        lossy="2025-11-25 output schemas must be object schemas",
    ),
    GoldenResult(
        "audio content dropped toward 2024-11-05",
        "tools/call",
        L3,
        L4,
        {
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
            ]
        },
        {"content": [{"type": "text", "text": "hello"}]},
        lossy="2024-11-05 has no audio content",
    ),
    GoldenResult(
        "resource_link dropped toward 2025-03-26 (prompt messages too)",
        "prompts/get",
        M,
        L3,
        {
            "resultType": "complete",
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "see"}},
                {
                    "role": "user",
                    "content": {"type": "resource_link", "uri": "file:///a", "name": "a"},
                },
            ],
        },
        {"messages": [{"role": "user", "content": {"type": "text", "text": "see"}}]},
        lossy="2025-03-26 has no resource links",
    ),
    # Client results (InputResponses in 2026): no resultType either way.
    GoldenResult(
        "ElicitResult <-> 2025-11-25",
        "elicitation/create",
        M,
        L11,
        ex("ElicitResult", "input-single-field"),
        ex("ElicitResult", "input-single-field"),
    ),
    GoldenResult(
        "ListRootsResult <-> 2024-11-05",
        "roots/list",
        M,
        L4,
        ex("ListRootsResult", "multiple-root-directories"),
        ex("ListRootsResult", "multiple-root-directories"),
    ),
    GoldenResult(
        "InitializeResult capabilities follow the chain",
        "initialize",
        L11,
        L4,
        {
            "protocolVersion": L11,
            "capabilities": {
                "tools": {"listChanged": True},
                "completions": {},
                "tasks": {"list": {}},
            },
            "serverInfo": {"name": "s", "version": "1"},
        },
        {
            "protocolVersion": L11,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "s", "version": "1"},
        },
        lossy="completions and tasks are newer than 2024-11-05",
    ),
]


@pytest.mark.parametrize("row", RESULTS, ids=[r.name for r in RESULTS])
def test_result_golden(row: GoldenResult, spec: Spec) -> None:
    golden = Golden(row.name, row.src, row.dst, row.input, row.expected, row.lossy, row.ctx)

    def fn(res: Any, src: Version, dst: Version, ctx: Context) -> Any:
        return translate.result(res, row.method, src, dst, ctx)

    def check(ver: str, res: Any) -> None:
        if row.ctx.cache_hints:
            check_result(spec, ver, row.method, res)

    run_golden(golden, fn, check)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def err(code: Any, message: str = "m", **data: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"code": code, "message": message}
    if data:
        out["data"] = data
    return out


def wrapped(original: dict[str, Any]) -> dict[str, Any]:
    return {"code": -32603, "message": original["message"], "data": {"originalError": original}}


_not_found = err(-32002, "Resource not found", uri="file:///nonexistent.txt")
_unsupported = ex("UnsupportedProtocolVersionError", "unsupported-version")["error"]
_mismatch = ex("HeaderMismatchError", "header-mismatch")["error"]
_missing = ex("MissingRequiredClientCapabilityError", "missing-elicitation-capability")["error"]
_url_required = err(
    -32042,
    "This request requires more information.",
    elicitations=[
        {
            "mode": "url",
            "elicitationId": "550e8400-e29b-41d4-a716-446655440000",
            "url": "https://mcp.example.com/connect?elicitationId=550e8400",
            "message": "Authorization is required to access your Example Co files.",
        }
    ],
)
_timeout = err(-32001, "Request timed out")

ERRORS: list[Golden] = [
    Golden("-32001 from 2025-11-25 is an SDK timeout: unchanged", L11, M, _timeout, _timeout),
    Golden("-32001 from 2025-06-18 is an SDK timeout: unchanged", L6, M, _timeout, _timeout),
    Golden("draft HeaderMismatch -32001 <-> -32020", D, M, _mismatch | {"code": -32001}, _mismatch),
    Golden(
        "draft MissingRequiredClientCapability -32003 <-> -32021",
        D,
        M,
        _missing | {"code": -32003},
        _missing,
    ),
    Golden(
        "draft UnsupportedProtocolVersion -32004 <-> -32022",
        D,
        M,
        _unsupported | {"code": -32004},
        _unsupported,
    ),
    Golden(
        "-32002 resource not found -> -32602 toward modern, data.uri kept",
        L11,
        M,
        _not_found,
        _not_found | {"code": -32602},
        lossy="-32602 is also every other invalid-params error",
    ),
    Golden(
        "-32002 from 2024-11-05 -> -32602",
        L4,
        M,
        _not_found,
        _not_found | {"code": -32602},
        lossy="as above",
    ),
    Golden(
        "a modern server's stray -32002 is fixed to -32602",
        M,
        M,
        _not_found,
        _not_found | {"code": -32602},
        lossy="-32002 must not be emitted by 2026-07-28",
    ),
    Golden(
        "-32042 URL elicitation required -> -32603 with the original",
        L11,
        M,
        _url_required,
        wrapped(_url_required),
        lossy="2026-07-28 has no -32042; the app turns it into input_required first",
    ),
    Golden(
        "-32042 toward the draft passes (no reserved range yet)",
        L11,
        D,
        _url_required,
        _url_required,
        lossy="no meaning in the draft",
    ),
    Golden(
        "an undefined reserved code from a modern server -> -32603",
        M,
        M,
        err(-32050, "Made up"),
        wrapped(err(-32050, "Made up")),
        lossy="undefined codes in -32020..-32099 MUST NOT be emitted",
    ),
    Golden(
        "a legacy -32001 would mean HeaderMismatch to a draft client: wrapped",
        L11,
        D,
        _timeout,
        wrapped(_timeout),
        lossy="collides with the draft's -32001",
    ),
    Golden(
        "UnsupportedProtocolVersion -> -32602 toward 2025, data kept",
        M,
        L11,
        _unsupported,
        _unsupported | {"code": -32602},
        lossy="2025 lifecycle uses -32602 for it",
    ),
    Golden(
        "HeaderMismatch -> -32600 toward 2025",
        M,
        L6,
        _mismatch,
        _mismatch | {"code": -32600},
        lossy="2025 has no header-mismatch code",
    ),
    Golden(
        "MissingRequiredClientCapability -> -32602 toward 2025",
        M,
        L11,
        _missing,
        _missing | {"code": -32602},
        lossy="2025 has no missing-capability code",
    ),
    Golden(
        "draft HeaderMismatch -> -32600 toward 2025",
        D,
        L11,
        _mismatch | {"code": -32001},
        _mismatch | {"code": -32600},
        lossy="as above",
    ),
    Golden(
        "modern -32002 (retired) -> legacy -32002",
        M,
        L11,
        _not_found,
        _not_found,
        lossy="checked one way",
    ),
    Golden(
        "application code outside the JSON-RPC range passes", L11, M, err(42, "app"), err(42, "app")
    ),
    Golden(
        "non-integer code -> -32603",
        L11,
        M,
        err("E1", "bad"),
        wrapped(err("E1", "bad")),
        lossy="codes MUST be integers",
    ),
    Golden(
        "-32042 toward 2025-06-18 passes (no policy there)",
        L11,
        L6,
        _url_required,
        _url_required,
        lossy="no meaning in 2025-06-18",
    ),
    Golden(
        "InvalidParams example <-> 2024-11-05",
        M,
        L4,
        ex("InvalidParamsError", "unknown-tool"),
        ex("InvalidParamsError", "unknown-tool"),
    ),
]


@pytest.mark.parametrize("row", ERRORS, ids=ids(ERRORS))
def test_error_golden(row: Golden, spec: Spec) -> None:
    def fn(e: Any, src: Version, dst: Version, ctx: Context) -> Any:
        return translate.error(e, src, dst)

    def check(ver: str, e: Any) -> None:
        if isinstance(e["code"], int):
            check_error(spec, ver, e)

    run_golden(row, fn, check)


# 2026-07-28 server/resources "Error Handling" (SEP-2164): a resources/read of
# a URI the server does not have is -32602 with the URI in data.uri; a 2025
# client expects -32002 for it. Any other -32602 is invalid params.
_modern_not_found = _not_found | {"code": -32602}
READ_ERRORS: list[Golden] = [
    Golden(
        "resources/read: modern -32602 with data.uri <-> 2025-11-25 -32002",
        M,
        L11,
        _modern_not_found,
        _not_found,
    ),
    Golden("... <-> 2024-11-05 -32002", M, L4, _modern_not_found, _not_found),
    Golden("... from the draft too", D, L11, _modern_not_found, _not_found),
    Golden(
        "resources/read: -32602 without data.uri stays invalid params",
        M,
        L11,
        err(-32602, "Invalid params: uri must be a string"),
        err(-32602, "Invalid params: uri must be a string"),
    ),
    Golden(
        "resources/read: -32602 with other data stays invalid params",
        M,
        L11,
        err(-32602, "bad cursor", cursor="x"),
        err(-32602, "bad cursor", cursor="x"),
    ),
]


@pytest.mark.parametrize("row", READ_ERRORS, ids=ids(READ_ERRORS))
def test_resource_read_error_golden(row: Golden, spec: Spec) -> None:
    def fn(e: Any, src: Version, dst: Version, ctx: Context) -> Any:
        return translate.error(e, src, dst, "resources/read")

    def check(ver: str, e: Any) -> None:
        check_error(spec, ver, e)

    run_golden(row, fn, check)


@pytest.mark.parametrize("method", [None, "tools/call", "prompts/get", "resources/list"])
def test_a_modern_invalid_params_with_a_uri_elsewhere_is_not_resource_not_found(
    method: str | None,
) -> None:
    e = _modern_not_found
    assert translate.error(e, v(M), v(L11), method) is e


@pytest.mark.parametrize("code", [-32700, -32600, -32601, -32602, -32603])
@pytest.mark.parametrize("src", [L4, L3, L6, L11, D, M])
@pytest.mark.parametrize("dst", [L4, L3, L6, L11, D, M])
def test_standard_jsonrpc_codes_pass_everywhere(code: int, src: str, dst: str) -> None:
    e = err(code, "standard", detail=1)
    assert translate.error(e, v(src), v(dst)) is e


@pytest.mark.parametrize("code", [c for c in range(-32019, -31999) if c != -32002])
@pytest.mark.parametrize("src", [L6, L11])
def test_legacy_sub_range_passes_to_modern(code: int, src: str) -> None:
    # basic/index "Error Codes": -32000..-32019 is legacy, implementation-defined
    # ("Apart from -32002 ... receivers MUST NOT assume any specific meaning").
    e = err(code)
    assert translate.error(e, v(src), v(M)) is e


@pytest.mark.parametrize("code", range(-32099, -32019))
@pytest.mark.parametrize("src", [L4, L11, D, M])
def test_nothing_undefined_in_reserved_range_reaches_modern(code: int, src: str) -> None:
    out = translate.error(err(code), v(src), v(M))
    assert not (-32099 <= out["code"] <= -32020) or out["code"] in (-32020, -32021, -32022)


# ---------------------------------------------------------------------------
# Notifications
# ---------------------------------------------------------------------------

_log = ex("LoggingMessageNotification", "log-database-connection-failed")
_progress = ex("ProgressNotification", "progress-message")
_updated = ex("ResourceUpdatedNotification", "file-resource-updated-notification")
_cancelled = ex("CancelledNotification", "user-requested-cancellation")
_ack = ex("SubscriptionsAcknowledgedNotification", "listen-acknowledged")

NOTIFICATIONS: list[Golden] = [
    Golden("notifications/message <-> 2025-11-25", M, L11, _log, _log),
    Golden("notifications/message <-> 2024-11-05", M, L4, _log, _log),
    Golden("notifications/progress <-> 2025-03-26", M, L3, _progress, _progress),
    Golden(
        "notifications/progress -> 2024-11-05 loses message",
        M,
        L4,
        _progress,
        _progress | {"params": drop(_progress["params"], "message")},
        lossy="progress messages are 2025-03-26+",
    ),
    Golden("notifications/cancelled <-> 2025-11-25", M, L11, _cancelled, _cancelled),
    Golden(
        "cancelled without requestId cannot exist in 2026",
        L11,
        M,
        note("notifications/cancelled", {"reason": "task"}),
        None,
        lossy="dropped",
    ),
    Golden(
        "resources/updated loses subscriptionId toward legacy",
        M,
        L11,
        _updated,
        _updated | {"params": {"uri": _updated["params"]["uri"]}},
        lossy="subscriptions/listen is 2026 only",
    ),
    Golden(
        "tools/list_changed <-> 2025-06-18",
        M,
        L6,
        note("notifications/tools/list_changed"),
        note("notifications/tools/list_changed"),
    ),
    Golden(
        "prompts/list_changed keeps other _meta, loses subscriptionId",
        M,
        L11,
        note("notifications/prompts/list_changed", {"_meta": {SUB_ID: 3, "x.example/k": 1}}),
        note("notifications/prompts/list_changed", {"_meta": {"x.example/k": 1}}),
        lossy="subscriptionId",
    ),
    Golden(
        "resources/list_changed with only a subscriptionId",
        M,
        L11,
        note("notifications/resources/list_changed", {"_meta": {SUB_ID: "s"}}),
        note("notifications/resources/list_changed"),
        lossy="subscriptionId",
    ),
    Golden(
        "subscriptions/acknowledged does not exist in legacy", M, L11, _ack, None, lossy="dropped"
    ),
    Golden(
        "elicitation/complete does not exist in 2026",
        L11,
        M,
        note("notifications/elicitation/complete", {"elicitationId": "e-1"}),
        None,
        lossy="dropped",
    ),
    Golden(
        "elicitation/complete still exists in the draft",
        L11,
        D,
        note("notifications/elicitation/complete", {"elicitationId": "e-1"}),
        note("notifications/elicitation/complete", {"elicitationId": "e-1"}),
    ),
    Golden(
        "tasks/status does not exist in 2026",
        L11,
        M,
        note(
            "notifications/tasks/status",
            {
                "taskId": "t",
                "status": "working",
                "createdAt": "2025-11-25T10:30:00Z",
                "lastUpdatedAt": "2025-11-25T10:30:00Z",
                "ttl": 60000,
            },
        ),
        None,
        lossy="dropped",
    ),
    Golden(
        "tasks/status does not exist in 2025-06-18",
        L11,
        L6,
        note(
            "notifications/tasks/status",
            {
                "taskId": "t",
                "status": "working",
                "createdAt": "2025-11-25T10:30:00Z",
                "lastUpdatedAt": "2025-11-25T10:30:00Z",
                "ttl": 60000,
            },
        ),
        None,
        lossy="dropped",
    ),
    Golden(
        "roots/list_changed does not exist in 2026",
        L11,
        M,
        note("notifications/roots/list_changed"),
        None,
        lossy="dropped",
    ),
    Golden(
        "initialized does not exist in 2026",
        L6,
        M,
        note("notifications/initialized"),
        None,
        lossy="dropped",
    ),
    Golden(
        "vendor notifications pass",
        L11,
        M,
        note("notifications/x.example/ping", {"a": 1}),
        note("notifications/x.example/ping", {"a": 1}),
    ),
]


@pytest.mark.parametrize("row", NOTIFICATIONS, ids=ids(NOTIFICATIONS))
def test_notification_golden(row: Golden, spec: Spec) -> None:
    def fn(msg: Any, src: Version, dst: Version, ctx: Context) -> Any:
        return translate.notification(msg, src, dst)

    run_golden(row, fn, lambda ver, msg: check_notification(spec, ver, msg))


# ---------------------------------------------------------------------------
# Capabilities
# ---------------------------------------------------------------------------

CLIENT_CAPS: list[Golden] = [
    Golden(
        "elicitation form+url <-> 2025-11-25",
        M,
        L11,
        ex("ClientCapabilities", "elicitation-form-and-url-mode-support"),
        ex("ClientCapabilities", "elicitation-form-and-url-mode-support"),
    ),
    Golden(
        "elicitation form+url -> 2025-06-18 (form only)",
        M,
        L6,
        ex("ClientCapabilities", "elicitation-form-and-url-mode-support"),
        {"elicitation": {}},
        lossy="2025-06-18 elicitation is form only",
    ),
    Golden(
        "url-only elicitation -> 2025-06-18: none",
        L11,
        L6,
        {"elicitation": {"url": {}}},
        {},
        lossy="no URL mode",
    ),
    Golden(
        "implicit form elicitation <-> 2025-06-18", M, L6, {"elicitation": {}}, {"elicitation": {}}
    ),
    Golden(
        "elicitation -> 2025-03-26: none",
        L6,
        L3,
        {"elicitation": {}, "roots": {}},
        {"roots": {}},
        lossy="elicitation is 2025-06-18+",
    ),
    Golden(
        "extensions -> legacy: none",
        M,
        L11,
        ex("ClientCapabilities", "extensions-ui-mime-types"),
        {},
        lossy="extensions are 2026+",
    ),
    Golden(
        "sampling tool use -> 2025-06-18",
        M,
        L6,
        ex("ClientCapabilities", "sampling-tool-use-support"),
        {"sampling": {}},
        lossy="sampling.tools is 2025-11-25+",
    ),
    Golden(
        "sampling baseline <-> 2024-11-05",
        M,
        L4,
        ex("ClientCapabilities", "sampling-minimum-baseline-support"),
        {"sampling": {}},
    ),
    Golden(
        "roots baseline <-> 2024-11-05",
        M,
        L4,
        ex("ClientCapabilities", "roots-minimum-baseline-support"),
        {"roots": {}},
    ),
    Golden(
        "tasks and roots.listChanged -> 2026",
        L11,
        M,
        {"roots": {"listChanged": True}, "tasks": {"list": {}}, "sampling": {}},
        {"roots": {}, "sampling": {}},
        lossy="tasks left core; roots/list_changed removed",
    ),
]

SERVER_CAPS: list[Golden] = [
    Golden(
        # The gateway bridges a 2025-11-25 client's tasks onto the extension
        # (app/upstream/modern/tasks.py), so it offers them as 2025-11-25 does.
        "extensions (tasks) -> 2025-11-25: capabilities.tasks",
        M,
        L11,
        ex("ServerCapabilities", "extensions-tasks"),
        {"tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}},
        lossy="extensions are 2026+",
    ),
    Golden(
        "extensions (tasks) -> 2025-06-18: none",
        M,
        L6,
        ex("ServerCapabilities", "extensions-tasks"),
        {},
        lossy="extensions are 2026+, tasks 2025-11-25 only",
    ),
    Golden(
        "resources subscribe+listChanged <-> 2024-11-05",
        M,
        L4,
        ex("ServerCapabilities", "resources-all-notifications"),
        ex("ServerCapabilities", "resources-all-notifications"),
    ),
    Golden(
        "logging <-> 2025-11-25",
        M,
        L11,
        ex("ServerCapabilities", "logging-minimum-baseline-support"),
        {"logging": {}},
    ),
    Golden(
        "completions -> 2024-11-05: none",
        M,
        L4,
        ex("ServerCapabilities", "completions-minimum-baseline-support"),
        {},
        lossy="completions is 2025-03-26+",
    ),
    Golden(
        "tasks -> 2026",
        L11,
        M,
        {"tools": {}, "tasks": {"list": {}}},
        {"tools": {}},
        lossy="tasks left core",
    ),
]


@pytest.mark.parametrize("row", CLIENT_CAPS, ids=ids(CLIENT_CAPS))
def test_client_capabilities_golden(row: Golden, spec: Spec) -> None:
    def fn(caps: Any, src: Version, dst: Version, ctx: Context) -> Any:
        return translate.client_capabilities(caps, src, dst)

    run_golden(row, fn, lambda ver, caps: check_caps(spec, ver, "ClientCapabilities", caps))


@pytest.mark.parametrize("row", SERVER_CAPS, ids=ids(SERVER_CAPS))
def test_server_capabilities_golden(row: Golden, spec: Spec) -> None:
    def fn(caps: Any, src: Version, dst: Version, ctx: Context) -> Any:
        return translate.server_capabilities(caps, src, dst)

    run_golden(row, fn, lambda ver, caps: check_caps(spec, ver, "ServerCapabilities", caps))


# ---------------------------------------------------------------------------
# Chain properties
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("row", REQUESTS, ids=ids(REQUESTS))
def test_request_chain_equals_single_steps(row: Golden) -> None:
    """Translating across several versions is the composition of adjacent steps."""
    src, dst = v(row.src), v(row.dst)
    path = list(known_versions())
    step = 1 if src.index < dst.index else -1
    msg = row.input
    caps = row.ctx.client_capabilities
    for i in range(src.index, dst.index, step):
        a, b = path[i], path[i + step]
        ctx = dataclasses.replace(row.ctx, client_capabilities=caps)
        msg = translate.request(msg, a, b, ctx)
        if caps is not None:
            caps = translate.client_capabilities(dict(caps), a, b)
    assert msg == row.expected


@pytest.mark.parametrize("name", [L4, L3, L6, L11, D, M])
def test_same_version_is_identity(name: str) -> None:
    msg = rpc("tools/list", {"cursor": "x"})
    res: dict[str, Any] = {"tools": []}
    assert translate.request(msg, v(name), v(name)) is msg
    assert translate.result(res, "tools/list", v(name), v(name)) is res
    assert translate.notification(_log, v(name), v(name)) is _log
    assert translate.server_capabilities(res, v(name), v(name)) is res


def test_unchanged_sub_objects_are_shared() -> None:
    """Only the path to a change is copied (no deep copies on the hot path)."""
    out = translate.result(_structured, "tools/call", v(M), v(L11))
    assert out["content"] is _structured["content"]
    assert out["structuredContent"] is _structured["structuredContent"]
    back = translate.request(_call_tool, v(M), v(L11))
    assert back["params"]["arguments"] is _call_tool["params"]["arguments"]
