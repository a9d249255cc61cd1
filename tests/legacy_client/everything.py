"""A legacy client through the gateway to the published server-everything
(behind the gateway over stdio or HTTP+SSE).

Usage: everything.py URL VERSION

Initializes offering VERSION; lists tools, calls `echo` and `get-sum`; answers
the server's sampling and elicitation requests with its callbacks (the server
sends them on its one stream, the gateway relays them on the call's answer);
gets the progress of `trigger-long-running-operation`; sets the log level and
collects the log line `toggle-simulated-logging` sends at once; pings.
"""

from __future__ import annotations

from typing import Any

from _common import connect, dump, main, outcome, types
from mcp.shared.context import RequestContext


async def run(url: str, args: list[str]) -> dict[str, Any]:
    version = args[0]
    asked: list[str] = []
    logs: list[dict[str, Any]] = []
    progress: list[float] = []

    async def sampling(
        context: RequestContext[Any, Any], params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        asked.append("sampling/createMessage")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="Sampled by a legacy client."),
            model="legacy-client-model",
            stopReason="endTurn",
        )

    async def elicitation(
        context: RequestContext[Any, Any], params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append("elicitation/create")
        return types.ElicitResult(action="accept", content={"name": "Ada Legacy", "check": True})

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(dump(params))

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with connect(
        url,
        version,
        sampling_callback=sampling,
        elicitation_callback=elicitation,
        logging_callback=logging,
    ) as (session, init, session_id):
        out: dict[str, Any] = {"initialize": dump(init), "has_session_id": bool(session_id())}
        tools = await session.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["echo"] = await outcome(session.call_tool("echo", {"message": "hello, legacy"}))
        out["sum"] = await outcome(session.call_tool("get-sum", {"a": 40, "b": 2}))
        out["sampling"] = await outcome(
            session.call_tool("trigger-sampling-request", {"prompt": "Say something"})
        )
        out["elicitation"] = await outcome(session.call_tool("trigger-elicitation-request", {}))
        out["asked"] = list(asked)
        out["long"] = await outcome(
            session.call_tool(
                "trigger-long-running-operation",
                {"duration": 1, "steps": 3},
                progress_callback=on_progress,
            )
        )
        out["progress"] = progress
        out["set_level"] = await outcome(session.set_logging_level("debug"))
        out["logging_on"] = await outcome(session.call_tool("toggle-simulated-logging", {}))
        out["logging_off"] = await outcome(session.call_tool("toggle-simulated-logging", {}))
        out["logs"] = [entry.get("data") for entry in logs]
        out["ping"] = await outcome(session.send_ping())
        return out


if __name__ == "__main__":
    main(run)
