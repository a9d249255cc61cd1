"""A legacy client through the gateway to a modern-only (2026-07-28) server.

Usage: modern_upstream.py URL VERSION [DECLINE]

Initializes offering VERSION (the gateway answers from the server's
server/discover); calls the modern fixture's tools, prompts and resources,
including those that answer InputRequiredResult: each input request reaches
this client as a real server-to-client request, answered by its own callbacks
(elicitation, sampling, roots), several in one round, several rounds, a prompt
and a resource that need input. Sets the log level, gets progress, completion,
pings. With DECLINE the elicitation callback declines: an answer like any
other.
"""

from __future__ import annotations

from typing import Any

from _common import connect, dump, main, outcome, types
from mcp.shared.context import RequestContext
from pydantic import AnyUrl


async def run(url: str, args: list[str]) -> dict[str, Any]:
    version = args[0]
    decline = len(args) > 1 and args[1] == "DECLINE"
    asked: list[dict[str, Any]] = []
    logs: list[dict[str, Any]] = []
    progress: list[float] = []

    async def sampling(
        context: RequestContext[Any, Any], params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        asked.append({"kind": "sampling", "params": dump(params)})
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="Paris"),
            model="legacy-client-model",
            stopReason="endTurn",
        )

    async def elicitation(
        context: RequestContext[Any, Any], params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append({"kind": "elicitation", "message": params.message})
        if decline:
            return types.ElicitResult(action="decline")
        message = params.message.lower()
        if "colour" in message:
            return types.ElicitResult(action="accept", content={"color": "green"})
        if "context" in message:
            return types.ElicitResult(action="accept", content={"context": "tests"})
        if "confirm" in message:
            return types.ElicitResult(action="accept", content={"ok": True})
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def roots(context: RequestContext[Any, Any]) -> types.ListRootsResult:
        asked.append({"kind": "roots"})
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/project", name="p")])

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(dump(params))

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    callbacks: dict[str, Any] = {
        "sampling_callback": sampling,
        "list_roots_callback": roots,
        "logging_callback": logging,
    }
    if version not in ("2024-11-05", "2025-03-26"):
        callbacks["elicitation_callback"] = elicitation

    def text_of(result: dict[str, Any]) -> Any:
        content = (result.get("result") or {}).get("content") or []
        return content[0].get("text") if content else result.get("error")

    async with connect(url, version, **callbacks) as (session, init, session_id):
        out: dict[str, Any] = {"initialize": dump(init), "has_session_id": bool(session_id())}
        tools = await session.list_tools()
        out["tools"] = [t.name for t in tools.tools]
        out["tools_list_fields"] = sorted(dump(tools))
        out["simple"] = text_of(await outcome(session.call_tool("test_simple_text", {})))
        out["error_tool"] = await outcome(session.call_tool("test_error_handling", {}))
        out["progress_tool"] = text_of(
            await outcome(
                session.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
            )
        )
        out["progress"] = progress
        out["set_level"] = await outcome(session.set_logging_level("info"))
        out["logging_tool"] = text_of(await outcome(session.call_tool("test_tool_with_logging")))
        out["logs"] = [entry.get("data") for entry in logs]
        asked.clear()
        out["sampling"] = text_of(
            await outcome(session.call_tool("test_input_required_result_sampling", {}))
        )
        out["roots"] = text_of(
            await outcome(session.call_tool("test_input_required_result_list_roots", {}))
        )
        if "elicitation_callback" in callbacks:
            out["elicitation"] = text_of(
                await outcome(session.call_tool("test_input_required_result_elicitation", {}))
            )
            out["multiple"] = text_of(
                await outcome(session.call_tool("test_input_required_result_multiple_inputs", {}))
            )
            out["multi_round"] = text_of(
                await outcome(session.call_tool("test_input_required_result_multi_round", {}))
            )
            prompt = await outcome(session.get_prompt("test_input_required_result_prompt", {}))
            out["prompt_with_input"] = prompt
            read = await outcome(session.read_resource(AnyUrl("test://needs-input")))
            out["resource_with_input"] = read
        out["asked"] = [a["kind"] for a in asked]
        out["prompt"] = await outcome(
            session.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
        )
        resources = await session.list_resources()
        out["resources"] = [str(r.uri) for r in resources.resources]
        out["read"] = await outcome(session.read_resource(AnyUrl("test://static-text")))
        out["missing"] = await outcome(session.read_resource(AnyUrl("test://nope")))
        out["templates"] = await outcome(session.list_resource_templates())
        out["completion"] = await outcome(
            session.complete(
                types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"),
                {"name": "arg1", "value": "test"},
            )
        )
        # The upstream wants Mcp-Param-Region mirrored from the argument; this
        # client knows nothing of headers: the gateway adds them.
        out["header_param"] = [
            text_of(await outcome(session.call_tool("test_header_param", {"region": region})))
            for region in ("eu", "zürich")
        ]
        out["ping"] = await outcome(session.send_ping())
        return out


if __name__ == "__main__":
    main(run)
