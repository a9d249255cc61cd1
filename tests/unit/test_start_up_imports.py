"""What the command line loads at start-up (issue 12's idle RSS, bench/README.md
"Where the idle RSS comes from"): checked in a fresh interpreter, as sys.modules
is per process, so that a new import does not undo it silently."""

from __future__ import annotations

import json
import subprocess
import sys

from tests import procs

_SCRIPT = """
import json, os, sys
import app.cli
import frozenlist
app.cli.fix_mmap_threshold()
app.cli.release_free_heap()
from aiohttp import connector
print(json.dumps({
    "modules": sorted(m for m in ("ctypes.util", "certifi") if m in sys.modules),
    "aiohttp_certificates": connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509"]
    + connector._SSL_CONTEXT_UNVERIFIED.cert_store_stats()["x509"],
    "pure_frozenlist": frozenlist.FrozenList is frozenlist.PyFrozenList,
    "libstdc++": "libstdc++" in open("/proc/self/maps").read(),
    "env_left": "FROZENLIST_NO_EXTENSIONS" in os.environ,
}))
"""


def test_command_line_start_up_loads_no_ca_bundle_no_library_search_no_libstdcxx() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], cwd=procs.ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # ctypes.util's find_library runs `ldconfig -p` in a child process; certifi is
    # imported by the first TLS handshake (app/upstream/tls.py), not at import.
    # frozenlist's compiled form is C++ (libstdc++ in the process) for a class only
    # aiohttp's tracing uses (app/upstream/__init__.py); the switch is not left set.
    assert report == {
        "modules": [],
        "aiohttp_certificates": 0,
        "pure_frozenlist": True,
        "libstdc++": False,
        "env_left": False,
    }, report
