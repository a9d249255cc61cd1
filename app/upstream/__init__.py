"""Transports toward the upstream server.

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
