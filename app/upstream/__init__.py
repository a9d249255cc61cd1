"""Transports toward the upstream server: each folder adapts one kind of
upstream to the seam the fronts talk to (base.py), whatever the client's era.

- `sessions/`: a legacy upstream's sessions, for clients of every era: the
  pool, the era probe, routing on shared streams, the GET-stream listener,
  the readiness check;
- `streamable_http/`, `http_sse/`, `stdio/`: a legacy upstream on each of its
  transports, under the sessions;
- `modern/`: a modern (2026-07-28) upstream, passed through to modern clients
  (passthrough.py) and adapted for legacy clients (session.py, transport.py,
  rounds.py, listen.py, tasks.py);
- `httpclient/`: no era: the HTTP client library under the HTTP kinds.

The other direction, a legacy upstream for modern clients, is app/mrtr/,
app/tasks/ and app/subscriptions/.

frozenlist, an aiohttp dependency, is imported here first, in its pure-Python
form: its compiled one is C++ and brings libstdc++ into the process, 1.1 MB
of idle RSS (bench/memory.py; docs/performance.md), for a class
aiohttp uses only in its tracing signals (`aiohttp/tracing.py`), which the
gateway never configures, so no call touches it. `FROZENLIST_NO_EXTENSIONS`
is the library's own switch, read once when it is imported; it is set for
that import only, so nothing else (a child process) sees it, and an operator
who set it keeps their value.
"""

from __future__ import annotations

import os
import sys

if "frozenlist" not in sys.modules and "FROZENLIST_NO_EXTENSIONS" not in os.environ:
    os.environ["FROZENLIST_NO_EXTENSIONS"] = "1"
    try:
        import frozenlist  # noqa: F401
    finally:
        del os.environ["FROZENLIST_NO_EXTENSIONS"]
