"""`MCP_SHIM_STATE_KEY` passed between the gateway's processes over a pipe,
never in an environment.

`/proc/<pid>/environ` shows the environment block a process was started
with, for as long as it runs, to every process of the same user (the check
is ptrace's read mode, which Yama's `ptrace_scope` does not restrict).
Removing the variable from `os.environ` changes nothing there. A stdio
upstream runs as the gateway's user, so it could read the key from its
parent's environ, or from a worker's if the supervisor put it there. So:

- `mcp-shim` started with the variable set replaces itself once (`execve`)
  with `python -m app.serving.cli --state-key-fd N ...`, the same command with an
  environment that lacks the variable. The key waits in a pipe whose read
  end is descriptor N; the new image reads it and closes it before it starts
  anything (app/serving/cli.py).
- The supervisor of `MCP_SHIM_WORKERS` gives each worker the key (the
  operator's, or the one it generated) through a new pipe of its own on
  every start (`pass_fds`); the worker reads it and closes it the same way.

Why a re-exec rather than overwriting the environment block in place (as
`setproctitle` does with argv): the kernel defines the new image's block as
exactly the environment passed to `execve`. Overwriting means finding the
block's addresses in `/proc/self/stat`, writing into the stack through
ctypes, and leaving the C library's `environ` pointing at rewritten memory.
The re-exec keeps the process id (PID 1 of a container, a service
manager's main process, signals sent to it). It costs one more interpreter
start, only when the key comes from the environment.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Final, NoReturn

from app.config import SettingsError
from app.settings.rules import STATE_KEY_MAX_CHARS

ENV_NAME: Final = "MCP_SHIM_STATE_KEY"
# The option that names the descriptor (`mcp-shim --state-key-fd N ...`).
FD_OPTION: Final = "--state-key-fd"


def hand_over(key: str) -> int:
    """A new descriptor from which `take` reads `key`, not inheritable: pass it
    in `pass_fds`, or make it inheritable for an exec. Closing it is the caller's.

    The whole key is written before the reader exists, so the write must not
    block: a pipe holds at least one page (4096 bytes) even when the user's
    pipe memory is over its soft limit, and the key is at most that long.
    """
    data = os.fsencode(key)
    if len(data) > STATE_KEY_MAX_CHARS:
        raise SettingsError(
            f"invalid configuration:\n  {ENV_NAME}: longer than {STATE_KEY_MAX_CHARS} characters"
        )
    read_fd, write_fd = os.pipe()
    try:
        os.set_blocking(write_fd, False)
        if data and os.write(write_fd, data) != len(data):
            raise OSError("the key did not fit in the pipe")
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        # The reader sees the end of the key as end of file.
        os.close(write_fd)
    return read_fd


def take(fd: int) -> str:
    """The key `hand_over` wrote, read from `fd`, which is closed here so that
    nothing started later inherits it. SettingsError when it cannot be read."""
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= STATE_KEY_MAX_CHARS:
            chunk = os.read(fd, STATE_KEY_MAX_CHARS + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise SettingsError(
            f"invalid configuration:\n  {ENV_NAME}: the key could not be read from "
            f"descriptor {fd} ({exc.strerror})"
        ) from None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass  # not open (EBADF, reported by the read above)
    return os.fsdecode(b"".join(chunks))


def exec_module(module: str, arguments: Sequence[str], key: str | None) -> NoReturn:
    """Replace this process with `python -m module [--state-key-fd N] *arguments`,
    its environment without the variable; the key, if any, waits in descriptor N."""
    env = {name: value for name, value in os.environ.items() if name != ENV_NAME}
    handed: list[str] = []
    if key is not None:
        fd = hand_over(key)
        os.set_inheritable(fd, True)
        handed = [FD_OPTION, str(fd)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", module, *handed, *arguments], env)
