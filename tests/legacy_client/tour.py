"""Everything one legacy client does with a server, through the gateway.

Usage: tour.py URL VERSION

Initializes offering VERSION; lists and calls tools, prompts, resources,
completion; answers the server's sampling, elicitation (2025-06-18 on) and
roots requests with its callbacks; sets the log level and collects the log
messages of a call; gets progress; calls `test_reconnection`, whose stream
the server closes mid-call (2025-11-25: the client reconnects with
Last-Event-ID and gets the result there); ends the session with DELETE.
"""

from __future__ import annotations

from typing import Any

from _common import connect, dump, main, outcome, types
from mcp.shared.context import RequestContext
from pydantic import AnyUrl


async def run(url: str, args: list[str]) -> dict[str, Any]:
    version = args[0]
    logs: list[dict[str, Any]] = []
    asked: dict[str, Any] = {}

    async def sampling(
        context: RequestContext[Any, Any], params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        asked["sampling"] = dump(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="Paris"),
            model="legacy-client-model",
            stopReason="endTurn",
        )

    async def elicitation(
        context: RequestContext[Any, Any], params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked["elicitation"] = dump(params)
        return types.ElicitResult(
            action="accept", content={"username": "ada", "email": "ada@example.com"}
        )

    async def roots(context: RequestContext[Any, Any]) -> types.ListRootsResult:
        asked["roots"] = True
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/project", name="p")])

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(dump(params))

    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    callbacks: dict[str, Any] = {
        "sampling_callback": sampling,
        "list_roots_callback": roots,
        "logging_callback": logging,
    }
    if version != "2025-03-26":
        callbacks["elicitation_callback"] = elicitation
    async with connect(url, version, **callbacks) as (session, init, session_id):
        out: dict[str, Any] = {
            "initialize": dump(init),
            "session_id_length": len(session_id() or ""),
        }
        tools = await session.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["tool_fields"] = sorted({k for t in tools.tools for k in dump(t)})
        out["simple"] = await outcome(session.call_tool("test_simple_text", {}))
        out["error_tool"] = await outcome(session.call_tool("test_error_handling", {}))
        out["sampling"] = await outcome(session.call_tool("test_sampling", {"prompt": "Capital?"}))
        if version != "2025-03-26":
            out["elicitation"] = await outcome(
                session.call_tool("test_elicitation", {"message": "Who are you?"})
            )
        out["roots"] = await outcome(session.call_tool("test_input_required_result_list_roots"))
        out["set_level"] = await outcome(session.set_logging_level("debug"))
        out["logging_tool"] = await outcome(session.call_tool("test_tool_with_logging", {}))
        out["logs"] = logs
        out["progress_tool"] = await outcome(
            session.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
        )
        out["progress"] = progress
        prompts = await session.list_prompts()
        out["prompts"] = sorted(p.name for p in prompts.prompts)
        out["prompt"] = await outcome(
            session.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
        )
        resources = await session.list_resources()
        out["resources"] = sorted(str(r.uri) for r in resources.resources)
        out["read"] = await outcome(session.read_resource(AnyUrl("test://static-text")))
        out["templates"] = await outcome(session.list_resource_templates())
        out["completion"] = await outcome(
            session.complete(
                types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"),
                {"name": "arg1", "value": "pa"},
            )
        )
        out["ping"] = await outcome(session.send_ping())
        out["reconnection"] = await outcome(session.call_tool("test_reconnection", {}))
        out["asked"] = asked
        return out


if __name__ == "__main__":
    main(run)
