"""The process and its HTTP serving, the top layer: the `mcp-shim` command
(cli.py), the ASGI app (server.py) on uvicorn's httptools protocol with the
gateway's connection bounds (http_protocol.py), and, with MCP_SHIM_WORKERS,
the supervisor and its workers (workers.py, workers_metrics.py), their shared
load table (load_board.py), the balancing of connections (balance.py,
accept_gate.py), the connection handed to its owner worker (handoff.py) and
the state key passed to the workers (state_key.py). Nothing below imports it:
what an answer needs of its connection is app/connection/."""
