"""One aggregated endpoint in front of many servers (docs/operations.md,
"Aggregation").

The pure protocol logic, in the style of translators/ (no I/O, no clock):
`names` (prefixed tool and prompt names), `uris` (resource URIs shared by
several servers), `lists` (merged lists and their pages), `capabilities` (the
union of the members' discover results), `sealed` (requestState, task ids and
cursors naming their server, sealed), `answers` (a member's answers and
notifications renamed for the aggregate), `routing` (which member a request
goes to, in that member's own names). The I/O: `members` (asking members
within a bound), `aggregator` (one modern request answered), `listen` (one
listen merged from every member's), `endpoint` (the aggregate as a 2026-07-28
server), `inprocess` (a member's route called in process), `loopback` (the
top-level graph's client, calling the endpoint in process), `build` and
`serve` (the whole built from the settings and served at `/mcp`).
"""
