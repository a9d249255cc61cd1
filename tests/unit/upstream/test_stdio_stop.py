"""How a stdio server process is stopped (2025-11-25 basic/lifecycle, Shutdown, stdio):
"the client SHOULD initiate shutdown by: first, closing the input stream to the
child process (the server); waiting for the server to exit, or sending SIGTERM if
the server does not exit within a reasonable time; sending SIGKILL if the server
does not exit within a reasonable time after SIGTERM".

These drive app/upstream/stdio/transport.py's stopping against real processes (cat, sleep,
a shell ignoring SIGTERM) rather than MCP servers: what is checked is signals and
process groups, which an MCP server can only make slower to show.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.unit.stdio_spawn import spawned
from tests.waiting import until


def _group_alive(pgid: int) -> bool:
    """A live (not zombie) process in the group: a killed child of the killed shell
    stays a zombie until init reaps it, which is no business of the gateway's."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@pytest.mark.parametrize(
    ("argv", "code", "signals"),
    [
        (["cat"], 0, []),  # ends when its stdin closes
        (["sleep", "30"], -signal.SIGTERM, ["SIGTERM"]),  # ignores stdin
        # Ignores SIGTERM too; its child `sleep` is in its process group.
        (["sh", "-c", "trap '' TERM; sleep 30; sleep 30"], -signal.SIGKILL, ["SIGTERM", "SIGKILL"]),
    ],
)
async def test_stdin_closed_then_sigterm_then_sigkill(
    argv: list[str], code: int, signals: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    transport, session = await spawned(argv, grace_s=0.3, max_processes=2)
    assert transport.processes == 1 and _group_alive(session.pid)
    await session.close()
    await transport.aclose()
    assert session.exited.done() and session.exited.result() == code
    # The whole group, the shell's child too. SIGKILL is sent to the group at
    # once, but a loaded kernel takes a moment to run the child's exit.
    await until(lambda: not _group_alive(session.pid), timeout_s=5.0, what="the whole group gone")
    assert transport.processes == 0
    sent = [
        line
        for line in capsys.readouterr().out.splitlines()
        if "upstream_process_signalled" in line
    ]
    assert [s for s in ("SIGTERM", "SIGKILL") if any(s in line for line in sent)] == signals
