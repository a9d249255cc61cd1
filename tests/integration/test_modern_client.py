"""The official mcp 2.x Python client (modern, 2026-07-28) through the gateway.

Each scenario is a script in tests/modern_client/ run under the mcp 2.x peer
environment (it cannot share a virtual environment with this project's
tests, which start the mcp 1.x fixture): the client connects with
``mode="auto"``, so it probes ``server/discover`` and adopts the gateway's
answer, then does real calls that the gateway serves from the legacy
fixture server (tests/fixtures/legacy). The scripts print what the client
observed; the assertions here are on that content, compared with what the
fixture is known to serve (its catalogue, its fixed texts and bytes).

The client itself validates every result against its 2026-07-28 types, so a
script that ran at all already proves the shapes parse; the results are also
checked against the spec's JSON schema here.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from tests.procs import run_modern_client
from tests.schema import MODERN, RESULT_DEFS, SPEC

PNG_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJ"
    "RU5ErkJggg=="
)
SERVER_INFO = {"name": "mcp-shim-legacy-fixture", "version": "1.0.0"}
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


def mcp_url(gateway_url: str) -> str:
    return gateway_url + "/mcp"


def fixture_base(legacy_url: str) -> str:
    return legacy_url.rsplit("/mcp", 1)[0]


def run(script: str, *args: str) -> dict[str, Any]:
    document = run_modern_client(script, *args)
    assert isinstance(document, dict)
    assert document["protocolVersion"] == MODERN, document
    # mode="auto" adopted the gateway's server/discover answer: no initialize fallback.
    assert document["adoptedVia"] == "discover", document
    return document


def result_of(outcome: dict[str, Any], method: str) -> dict[str, Any]:
    assert "result" in outcome, f"expected a result, the client got {outcome}"
    result: dict[str, Any] = outcome["result"]
    SPEC.validate(MODERN, RESULT_DEFS[method], result)
    assert result["resultType"] == "complete"
    assert result["_meta"][SERVER_INFO_META] == SERVER_INFO
    return result


def error_of(outcome: dict[str, Any]) -> dict[str, Any]:
    assert "error" in outcome, f"expected an MCP error, the client got {outcome}"
    error: dict[str, Any] = outcome["error"]
    return error


def texts(result: dict[str, Any]) -> list[str]:
    return [block["text"] for block in result["content"] if block["type"] == "text"]


# ---------------------------------------------------------------------------
# discover and the four lists
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def listed(gateway_url: str, legacy_url: str) -> dict[str, Any]:
    document = run("discover_and_list.py", mcp_url(gateway_url))
    # Read right after, so list-changing tests elsewhere cannot slip in between.
    document["catalog"] = httpx.get(fixture_base(legacy_url) + "/debug/catalog").json()
    return document


def test_discover_is_synthesised_from_the_legacy_initialize(listed: dict[str, Any]) -> None:
    discover = listed["discover"]
    SPEC.validate(MODERN, "DiscoverResult", discover)
    assert MODERN in discover["supportedVersions"]
    assert discover["_meta"][SERVER_INFO_META] == SERVER_INFO
    assert listed["serverInfo"]["name"] == SERVER_INFO["name"]
    assert listed["instructions"].startswith("Legacy MCP server (mcp 1.x)")
    assert isinstance(discover["ttlMs"], int) and discover["ttlMs"] >= 0
    assert discover["cacheScope"] in ("public", "private")
    # The fixture declares tools, prompts, resources, logging and completions.
    for capability in ("tools", "prompts", "resources", "completions"):
        assert capability in listed["capabilities"], listed["capabilities"]


def test_tools_list_is_the_fixtures_in_order_with_schemas_untouched(
    listed: dict[str, Any],
) -> None:
    result = result_of({"result": listed["tools"]}, "tools/list")
    names = [tool["name"] for tool in result["tools"]]
    assert names == list(listed["catalog"]["tools"])
    by_name = {tool["name"]: tool for tool in result["tools"]}
    assert by_name["echo"]["description"].startswith("Returns `text` at once")
    assert by_name["slow_echo"]["inputSchema"]["properties"]["ms"]["maximum"] == 600000
    # JSON Schema 2020-12 keywords pass through as the legacy server wrote them.
    schema = by_name["json_schema_2020_12_tool"]["inputSchema"]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$defs"]["address"]["$anchor"] == "addressDef"
    assert schema["allOf"] and schema["if"] and schema["then"] and schema["else"]
    assert schema["additionalProperties"] is False
    assert by_name["structured_echo"]["outputSchema"]["required"] == ["text", "length"]
    assert by_name["test_header_param"]["inputSchema"]["properties"]["region"]["x-mcp-header"] == (
        "Region"
    )
    assert result["ttlMs"] >= 0 and result["cacheScope"] in ("public", "private")


def test_prompts_resources_and_templates_lists(listed: dict[str, Any]) -> None:
    prompts = result_of({"result": listed["prompts"]}, "prompts/list")
    assert [p["name"] for p in prompts["prompts"]] == list(listed["catalog"]["prompts"])
    with_args = next(p for p in prompts["prompts"] if p["name"] == "test_prompt_with_arguments")
    assert [(a["name"], a["required"]) for a in with_args["arguments"]] == [
        ("arg1", True),
        ("arg2", True),
    ]
    assert all(p["description"] for p in prompts["prompts"])

    resources = result_of({"result": listed["resources"]}, "resources/list")
    assert [r["uri"] for r in resources["resources"]] == list(listed["catalog"]["resources"])
    binary = next(r for r in resources["resources"] if r["uri"] == "test://static-binary")
    assert binary["mimeType"] == "image/png"

    templates = result_of({"result": listed["templates"]}, "resources/templates/list")
    assert [t["uriTemplate"] for t in templates["resourceTemplates"]] == list(
        listed["catalog"]["resourceTemplates"]
    )
    for result in (prompts, resources, templates):
        assert result["ttlMs"] >= 0 and result["cacheScope"] in ("public", "private")


# ---------------------------------------------------------------------------
# tools/call
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def called(gateway_url: str) -> dict[str, Any]:
    return run("call_tools.py", mcp_url(gateway_url))


def test_text_tools(called: dict[str, Any]) -> None:
    assert texts(result_of(called["echo"], "tools/call")) == ["hello through the shim"]
    simple = result_of(called["simple_text"], "tools/call")
    assert texts(simple) == ["This is a simple text response for testing."]
    assert simple.get("isError") in (None, False)


def test_image_and_mixed_content(called: dict[str, Any]) -> None:
    image = result_of(called["image"], "tools/call")["content"]
    assert image == [{"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}]
    assert base64.b64decode(image[0]["data"]).startswith(b"\x89PNG\r\n\x1a\n")
    mixed = result_of(called["mixed"], "tools/call")["content"]
    assert [block["type"] for block in mixed] == ["text", "image", "resource"]
    assert json.loads(mixed[2]["resource"]["text"]) == {"test": "data", "value": 123}


def test_tool_failure_is_an_is_error_result(called: dict[str, Any]) -> None:
    result = result_of(called["is_error"], "tools/call")
    assert result["isError"] is True
    assert texts(result) == ["This tool intentionally returns an error for testing"]


def test_structured_content_and_param_header(called: dict[str, Any]) -> None:
    structured = result_of(called["structured"], "tools/call")
    assert structured["structuredContent"] == {"text": "abcd", "length": 4}
    # The client mirrors `region` into Mcp-Param-Region (x-mcp-header); the
    # gateway checks it against the tool's annotation and forwards the call.
    assert texts(result_of(called["header_param"], "tools/call")) == ["region=eu-west-1"]


def test_json_rpc_errors_from_tools(called: dict[str, Any]) -> None:
    unknown = error_of(called["unknown_tool"])
    assert unknown["code"] == -32602 and "no_such_tool" in unknown["message"]
    # A 2025 SDK's -32001 (request timeout) passes unchanged ...
    assert error_of(called["sdk_timeout_code"])["code"] == -32001
    # ... an undefined code in -32020..-32099 becomes -32603 with the original kept.
    reserved = error_of(called["reserved_code"])
    assert reserved["code"] == -32603
    assert reserved["data"]["originalError"] == {"code": -32050, "message": "vendor code"}


def test_progress_callback_gets_every_step_before_the_result(called: dict[str, Any]) -> None:
    assert texts(result_of(called["slow_echo"], "tools/call")) == ["slow done"]
    assert called["progress"] == [
        {"progress": float(step), "total": 3.0, "message": f"step {step} of 3"}
        for step in (1, 2, 3)
    ]


# ---------------------------------------------------------------------------
# resources/read
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def read(gateway_url: str) -> dict[str, Any]:
    return run("read_resources.py", mcp_url(gateway_url))


def test_read_text_resource(read: dict[str, Any]) -> None:
    result = result_of(read["text"], "resources/read")
    assert result["contents"] == [
        {
            "uri": "test://static-text",
            "mimeType": "text/plain",
            "text": "This is the content of the static text resource.",
        }
    ]
    assert result["ttlMs"] >= 0 and result["cacheScope"] in ("public", "private")


def test_read_binary_resource(read: dict[str, Any]) -> None:
    (content,) = result_of(read["binary"], "resources/read")["contents"]
    assert content["uri"] == "test://static-binary"
    assert content["mimeType"] == "image/png"
    assert base64.b64decode(content["blob"]) == base64.b64decode(PNG_BASE64)


def test_read_templated_resource(read: dict[str, Any]) -> None:
    (content,) = result_of(read["template"], "resources/read")["contents"]
    assert content["uri"] == "test://template/42/data"
    assert json.loads(content["text"]) == {
        "id": "42",
        "templateTest": True,
        "data": "Data for ID: 42",
    }


def test_resource_not_found_is_invalid_params_with_the_uri(read: dict[str, Any]) -> None:
    # The fixture answers the legacy -32002; a 2026-07-28 client gets -32602.
    error = error_of(read["not_found"])
    assert error["code"] == -32602
    assert error["data"] == {"uri": "test://does-not-exist"}
    assert "not found" in error["message"].lower()


# ---------------------------------------------------------------------------
# prompts/get and completion/complete
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prompted(gateway_url: str) -> dict[str, Any]:
    return run("prompts_and_completion.py", mcp_url(gateway_url))


def test_get_prompts(prompted: dict[str, Any]) -> None:
    simple = result_of(prompted["simple"], "prompts/get")
    assert simple["messages"] == [
        {
            "role": "user",
            "content": {"type": "text", "text": "This is a simple prompt for testing."},
        }
    ]
    with_args = result_of(prompted["with_args"], "prompts/get")
    assert with_args["messages"][0]["content"]["text"] == (
        "Prompt with arguments: arg1='one', arg2='two'"
    )
    image = result_of(prompted["with_image"], "prompts/get")["messages"]
    assert image[0]["content"] == {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}
    assert image[1]["content"]["text"] == "Please analyze the image above."


def test_prompt_errors(prompted: dict[str, Any]) -> None:
    missing = error_of(prompted["missing_args"])
    assert missing["code"] == -32602 and "arg2" in missing["message"]
    unknown = error_of(prompted["unknown"])
    assert unknown["code"] == -32602 and "no_such_prompt" in unknown["message"]


def test_completion(prompted: dict[str, Any]) -> None:
    prompt = result_of(prompted["complete_prompt"], "completion/complete")
    assert prompt["completion"] == {
        "values": ["paris", "park", "party"],
        "total": 3,
        "hasMore": False,
    }
    template = result_of(prompted["complete_template"], "completion/complete")
    assert template["completion"]["values"] == ["42"]


# ---------------------------------------------------------------------------
# notifications/message and the logLevel opt-in
# ---------------------------------------------------------------------------


def test_logs_relayed_at_and_above_the_requested_level(gateway_url: str) -> None:
    document = run("logging_levels.py", mcp_url(gateway_url), "warning")
    # The fixture sent all eight levels (it has no logging/setLevel from the gateway) ...
    result = result_of(document["result"], "tools/call")
    assert result["structuredContent"] == {"sent": LEVELS}
    # ... and the client received exactly those at or above "warning", in order.
    assert document["received"] == [
        {"level": level, "logger": "legacy-fixture", "data": f"{level} message"}
        for level in LEVELS[LEVELS.index("warning") :]
    ]


def test_no_logs_without_the_opt_in(gateway_url: str) -> None:
    document = run("logging_levels.py", mcp_url(gateway_url))
    result = result_of(document["result"], "tools/call")
    assert result["structuredContent"] == {"sent": LEVELS}
    assert document["received"] == []
