"""Multi round-trip through the gateway, driven by the mcp 2.x client's own MRTR loop.

Usage: mrtr_tools.py URL RUN_ID [AUTHORIZATION]

The legacy fixture's tools ask for input the 2025 way; the gateway turns each
question into `input_required`, and the client's driver
(mcp/client/_input_required.py) answers through the callbacks below and
retries with `inputResponses` + `requestState` until the result is complete.
The callbacks answer like a user would: forms filled from their schema, URL
elicitations "visited" (an HTTP GET of the URL, which completes it at the
fixture) and accepted, sampling with a canned assistant message, roots with
one project directory. Every input request the client received is recorded
with its key, so the test sees how the gateway named and grouped them.

Each tool call carries `marker=<RUN_ID>-<scenario>`: the fixture counts
tools/call by marker, so the test can prove each client call reached the
upstream exactly once.
"""

from __future__ import annotations

from typing import Any

import httpx2
import mcp_types as types
from _common import connection_facts, dump, main, outcome
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

ROOT_URI = "file:///work/project"
SAMPLED_TEXT = "Paris is the capital of France."

asked: list[dict[str, Any]] = []


def fill(schema: dict[str, Any]) -> dict[str, Any]:
    """What a user would type into the form `schema` describes."""
    content: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type")
        if "enum" in prop:
            content[name] = prop["enum"][0]
        elif kind == "string":
            content[name] = f"Alice-{name}"
        elif kind in ("integer", "number"):
            content[name] = max(int(prop.get("minimum", 0)), 30)
        elif kind == "boolean":
            content[name] = True
    return content


async def on_elicit(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    key = str(context.request_id)
    if isinstance(params, types.ElicitRequestURLParams):
        asked.append({"key": key, "method": "elicitation/create", "mode": "url"})
        async with httpx2.AsyncClient() as browser:  # the user follows the link
            await browser.get(params.url)
        return types.ElicitResult(action="accept")
    schema = params.requested_schema
    raw = schema if isinstance(schema, dict) else schema.model_dump(by_alias=True)
    asked.append({"key": key, "method": "elicitation/create", "mode": "form"})
    return types.ElicitResult(action="accept", content=fill(raw))


async def on_sample(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    asked.append({"key": str(context.request_id), "method": "sampling/createMessage"})
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=SAMPLED_TEXT),
        model="test-model",
        stop_reason="endTurn",
    )


async def on_roots(context: ClientRequestContext) -> types.ListRootsResult:
    asked.append({"key": str(context.request_id), "method": "roots/list"})
    return types.ListRootsResult(roots=[types.Root(uri=ROOT_URI, name="Project")])


async def run(url: str, args: list[str]) -> dict[str, Any]:
    run_id = args[0]
    authorization = args[1] if len(args) > 1 else None
    headers = {"authorization": authorization} if authorization else {}
    transport = streamable_http_client(
        url, http_client=httpx2.AsyncClient(headers=headers, timeout=30.0)
    )
    client = Client(
        transport,
        mode="auto",
        cache=None,
        read_timeout_seconds=30.0,
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
        list_roots_callback=on_roots,
    )
    out: dict[str, Any] = {}

    async def scenario(name: str, call: Any) -> None:
        asked.clear()
        out[name] = {**(await outcome(call)), "asked": list(asked)}

    async with client:
        out.update(connection_facts(client))
        await client.list_tools()

        def tool(name: str, scenario_name: str, **arguments: Any) -> Any:
            return client.call_tool(name, {**arguments, "marker": f"{run_id}-{scenario_name}"})

        await scenario("elicit_keyed", tool("ask_github_login", "elicit_keyed"))
        await scenario("elicit_unkeyed", tool("ask_name", "elicit_unkeyed"))
        await scenario("profile", tool("ask_profile", "profile"))
        await scenario("sampling", tool("ask_sampling", "sampling", prompt="Capital of France?"))
        await scenario("roots_call_stream", tool("ask_roots", "roots_call_stream"))
        await scenario("roots_get_stream", tool("ask_roots_get_stream", "roots_get_stream"))
        await scenario(
            "all_at_once",
            tool("ask_all_at_once", "all_at_once", elicitations=2, samplings=2, roots=1),
        )
        await scenario(
            "all_at_once_keyed",
            tool(
                "ask_all_at_once",
                "all_at_once_keyed",
                elicitations=1,
                samplings=1,
                roots=1,
                keyed=True,
            ),
        )
        await scenario("rounds", tool("ask_in_rounds", "rounds", rounds=3))
        await scenario("url_consent", tool("ask_url_consent", "url_consent"))
        await scenario(
            "url_required",
            tool("connect_account", "url_required", account=f"acct-{run_id}"),
        )
        await scenario(
            "conformance_multiple",
            tool("test_input_required_result_multiple_inputs", "conformance_multiple"),
        )
        await scenario("prompt", client.get_prompt("ask_topic_prompt", {}))
        await scenario("resource", client.read_resource("test://consent/weather"))
    return dump(out)


if __name__ == "__main__":
    main(run)
