"""Request ids made by the gateway (app/serving/server.py `_NewRequestIds`): the form the
X-Request-Id header had (16 lower-case hex digits), never repeated by one
process, and a different prefix in every process."""

from __future__ import annotations

import os
import re

from app.serving import server

_FORM = re.compile(r"^[0-9a-f]{16}$")


def test_ids_have_the_form_and_do_not_repeat() -> None:
    ids = [server._request_id("") for _ in range(10_000)]
    assert all(_FORM.match(i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_client_id_is_kept_and_a_bad_one_replaced() -> None:
    assert server._request_id("client-chosen.1") == "client-chosen.1"
    assert _FORM.match(server._request_id("bad id\n"))


def test_a_wrapped_counter_draws_a_new_prefix() -> None:
    ids = server._NewRequestIds()
    prefix = ids()[:8]
    ids._counter = iter([0x1_0000_0000])  # the counter past 32 bits
    fresh = ids()
    assert _FORM.match(fresh) and fresh[:8] != prefix


def test_a_forked_child_draws_its_own_prefix() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, to the parent
        os.write(write, server._request_id("").encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert _FORM.match(child)
    assert child[:8] != server._request_id("")[:8]
