"""prompts/get and completion/complete through the gateway.

Usage: prompts_and_completion.py URL
"""

from __future__ import annotations

from typing import Any

from _common import connect, connection_facts, main, outcome
from mcp_types import PromptReference, ResourceTemplateReference


async def run(url: str, args: list[str]) -> dict[str, Any]:
    async with connect(url) as client:
        prompt_ref = PromptReference(type="ref/prompt", name="test_prompt_with_arguments")
        template_ref = ResourceTemplateReference(
            type="ref/resource", uri="test://template/{id}/data"
        )
        return {
            **connection_facts(client),
            "simple": await outcome(client.get_prompt("test_simple_prompt")),
            "with_args": await outcome(
                client.get_prompt("test_prompt_with_arguments", {"arg1": "one", "arg2": "two"})
            ),
            "with_image": await outcome(client.get_prompt("test_prompt_with_image")),
            "missing_args": await outcome(
                client.get_prompt("test_prompt_with_arguments", {"arg1": "one"})
            ),
            "unknown": await outcome(client.get_prompt("no_such_prompt")),
            "complete_prompt": await outcome(
                client.complete(prompt_ref, {"name": "arg1", "value": "pa"})
            ),
            "complete_template": await outcome(
                client.complete(template_ref, {"name": "id", "value": "4"})
            ),
        }


if __name__ == "__main__":
    main(run)
