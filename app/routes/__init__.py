"""The HTTP routes: each parses its request, hands it to a front, and answers.

`edge` holds what every route checks first (Host and Origin, the body's size
and pace) and the gateway's own URL; `mcp` is the MCP endpoint (every client's
POST, a legacy session's GET and DELETE); `sse` the HTTP+SSE transport of
2024-11-05 clients; `status` health, readiness, metrics and the OAuth
resource metadata; `methods` the methods of the routes a browser may reach
(their own, OPTIONS, else 405 with their Allow) and `cors` what browsers on an
allowed origin are answered. The objects they hand requests to are the app's
`Wiring` (app/wiring.py).
"""
