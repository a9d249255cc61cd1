"""Run a command as a child subreaper: orphans among its descendants are re-parented
to it, as they are to PID 1 of a container (`python subreaper.py cmd args...`)."""

from __future__ import annotations

import ctypes
import os
import sys

PR_SET_CHILD_SUBREAPER = 36

if __name__ == "__main__":
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")
    # The attribute survives exec: the command itself is the subreaper.
    os.execvp(sys.argv[1], sys.argv[1:])
