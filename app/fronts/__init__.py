"""The client side: one front per client era, each in its own folder.

- `modern/`: 2026-07-28 clients (stateless POST, `_meta` per request): the
  checks of what they send and the `Gateway` that runs one call end to end.
- `legacy/`: 2024-11-05 .. 2025-11-25 Streamable HTTP clients (`initialize`,
  `Mcp-Session-Id`, the GET stream, DELETE): the checks, the sessions each
  client owns and their bounds, and `LegacyFront`.
- `http_sse/`: 2024-11-05 HTTP+SSE clients (`GET /sse`, `POST /messages`),
  a transport over the legacy front.
- `shared/`: what every era uses: the answer writer (JSON or SSE), the
  Host and Origin guard, the header-value guard, the OAuth pass-through.

`base.py` names what the routes call on a front. The routes (app/routes/)
parse a request and hand it to one of them; the fronts talk to the upstream
through the seam of app/upstream/.
"""
