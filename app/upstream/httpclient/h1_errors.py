"""The exceptions of the gateway's own HTTP/1.1 client (h1.py, h1_connection.py).

Errors are these modules' own classes; `h1_adapter.upstream_error` turns them
into the gateway's, as each other adapter does its library's.
"""

from __future__ import annotations


class H1Error(Exception):
    """Any failure of an exchange on this client."""


class ConnectFailed(H1Error):
    """No connection could be made (refused, unreachable, name or TLS failure)."""


class ConnectionLost(H1Error):
    """The connection closed or broke before the answer was complete."""


class StaleConnection(ConnectionLost):
    """A reused connection closed before any byte of the answer: the server
    may have closed it idle just as the request went out (resendable POSTs)."""


class H1Timeout(H1Error):
    """One of the timeouts ran out."""


class ConnectTimeout(H1Timeout):
    pass


class PoolTimeout(H1Timeout):
    """No connection of the bounded pool came free in time."""


class ReadTimeout(H1Timeout):
    pass


class MalformedAnswer(H1Error):
    """What came is not an HTTP/1.1 answer (or its head is over the bounds)."""


class AnswerTooLarge(H1Error):
    """The answer's decoded body is over `max_answer_bytes`; its connection is closed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the upstream answer exceeded {limit} bytes")
        self.limit = limit
