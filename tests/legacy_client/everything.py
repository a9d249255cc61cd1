"""A legacy client through the gateway to a server with tools that ask their
caller, report progress and log (server-everything behind the legacy kinds, the
mcp 2.x fixture behind the modern one).

Usage: everything.py URL VERSION PLAN

PLAN is JSON naming the server's tools (tests/integration/everything.py,
`client_plan`): each step is {"tool", "arguments"}; "sum" may be null;
"elicited" is the content the elicitation callback accepts with.

Initializes offering VERSION; lists tools, calls the echo and sum tools; answers
the server's sampling and elicitation requests with its callbacks (the gateway
relays them on the call's answer); gets the progress of the progress tool; sets
the log level and collects the log lines of the two logging calls; pings.
"""

from __future__ import annotations

import json
from typing import Any

from _common import connect, dump, main, outcome, types
from mcp.shared.context import RequestContext


def call(session: Any, step: dict[str, Any], **kwargs: Any) -> Any:
    return session.call_tool(step["tool"], step["arguments"], **kwargs)


async def run(url: str, args: list[str]) -> dict[str, Any]:
    version, raw_plan = args
    plan: dict[str, Any] = json.loads(raw_plan)
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
        return types.ElicitResult(action="accept", content=plan["elicited"])

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
        out["echo"] = await outcome(call(session, plan["echo"]))
        out["sum"] = None if plan["sum"] is None else await outcome(call(session, plan["sum"]))
        out["sampling"] = await outcome(call(session, plan["sampling"]))
        out["elicitation"] = await outcome(call(session, plan["elicitation"]))
        out["asked"] = list(asked)
        out["long"] = await outcome(call(session, plan["progress"], progress_callback=on_progress))
        out["progress"] = progress
        out["set_level"] = await outcome(session.set_logging_level("debug"))
        out["logging_on"] = await outcome(call(session, plan["log_on"]))
        out["logging_off"] = await outcome(call(session, plan["log_off"]))
        out["logs"] = [entry.get("data") for entry in logs]
        out["ping"] = await outcome(session.send_ping())
        return out


if __name__ == "__main__":
    main(run)
