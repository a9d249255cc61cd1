"""What a modern client is told of tasks: the extension in `server/discover`
when the upstream runs tasks for `tools/call` (or the gateway runs some itself,
MCP_SHIM_TASK_TOOLS), and each tool's `execution.taskSupport` in `tools/list`.
"""

from __future__ import annotations

from app.call import Message
from app.mrtr.lanes import Lanes
from app.tasks import own
from app.upstream.sessions.pool import PooledSession
from translators import tasks as wire


class Advertiser:
    def __init__(self, tools: tuple[str, ...], lanes: Lanes | None) -> None:
        self._tools = tools  # MCP_SHIM_TASK_TOOLS
        self._lanes = lanes

    def offered(self, pooled: PooledSession) -> bool:
        return self.runs_own or wire.upstream_runs_tool_tasks(pooled.server_capabilities)

    @property
    def runs_own(self) -> bool:
        return bool(self._tools) and self._lanes is not None

    def discover_capabilities(self, pooled: PooledSession, caps: Message) -> Message:
        return wire.advertise(caps) if self.offered(pooled) else caps

    def annotate_tools(self, pooled: PooledSession, upstream: Message, result: Message) -> Message:
        """A translated tools/list result with each tool's taskSupport (from the
        upstream's own result: the translation drops the 2025-11-25 field)."""
        if not self.offered(pooled):
            return result
        tools = upstream.get("tools")
        named = [
            t
            for t in (tools if isinstance(tools, list) else [])
            if isinstance(t, dict) and isinstance(t.get("name"), str)
        ]
        runs = wire.upstream_runs_tool_tasks(pooled.server_capabilities)
        modes = {t["name"]: wire.tool_mode(t) if runs else "forbidden" for t in named}
        for name, mode in modes.items():
            if mode == "forbidden" and self.runs_own and own.matches(self._tools, name):
                modes[name] = "optional"
        return wire.with_task_support(result, modes)
