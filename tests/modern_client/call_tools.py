"""tools/call through the gateway: text, image, isError, structured, JSON-RPC errors, progress.

Usage: call_tools.py URL
"""

from __future__ import annotations

from typing import Any

from _common import connect, connection_facts, dump, main, outcome


async def run(url: str, args: list[str]) -> dict[str, Any]:
    progress: list[dict[str, Any]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": value, "total": total, "message": message})

    async with connect(url) as client:
        # The client validates structuredContent against the tool's outputSchema
        # and needs Mcp-Param-* annotations: it lists the tools first, as apps do.
        await client.list_tools()
        out: dict[str, Any] = {**connection_facts(client)}
        out["echo"] = await outcome(client.call_tool("echo", {"text": "hello through the shim"}))
        out["simple_text"] = await outcome(client.call_tool("test_simple_text", {}))
        out["image"] = await outcome(client.call_tool("test_image_content", {}))
        out["mixed"] = await outcome(client.call_tool("test_multiple_content_types", {}))
        out["is_error"] = await outcome(client.call_tool("test_error_handling", {}))
        out["structured"] = await outcome(client.call_tool("structured_echo", {"text": "abcd"}))
        out["header_param"] = await outcome(
            client.call_tool("test_header_param", {"region": "eu-west-1"})
        )
        out["unknown_tool"] = await outcome(client.call_tool("no_such_tool", {}))
        out["sdk_timeout_code"] = await outcome(
            client.call_tool("raise_error", {"code": -32001, "message": "Request timed out"})
        )
        out["reserved_code"] = await outcome(
            client.call_tool("raise_error", {"code": -32050, "message": "vendor code"})
        )
        out["slow_echo"] = await outcome(
            client.call_tool(
                "slow_echo",
                {"text": "slow done", "ms": 300, "steps": 3},
                progress_callback=on_progress,
            )
        )
        out["progress"] = progress
        return dump(out)


if __name__ == "__main__":
    main(run)
