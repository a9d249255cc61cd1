"""One aggregated endpoint in front of many servers (docs/operations.md,
"Aggregation").

The pure protocol logic, in the style of translators/ (no I/O, no clock):
`names` (prefixed tool and prompt names), `uris` (resource URIs shared by
several servers), `lists` (merged lists and the gateway's own cursor),
`capabilities` (the union of the members' discover results), `sealed`
(requestState, task ids and cursors naming their server, sealed), `answers`
(a member's answers and notifications renamed for the aggregate), `routing`
(which member a request goes to, in that member's own names). The I/O part,
`aggregator`, speaks 2026-07-28 to each member's own endpoint and is itself one
modern MCP server.
"""
