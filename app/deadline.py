"""A deadline over the steps of one call: armed only while a step is awaited.

What `asyncio.timeout_at` around each step did, for less: that context
manager is a coroutine pair and a state machine around the same timer handle,
which costs more per enter and exit than this (`bench/asyncio_costs.py`).
Same contract: at
the deadline the task is cancelled where the step waits, the step raises
`TimeoutError`, and a cancel that came from elsewhere (the client left) stays
a `CancelledError`.

One timer for all the steps of a call, armed at the first and cancelled by
`close()`, not one per step: between steps a firing timer only notes that
the deadline passed, and the next step is cancelled at its first suspension.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class StepDeadline:
    """`with deadline: await step()` for each step, then `close()`; `expired`:
    it fired during the last step."""

    __slots__ = ("_cancelling", "_handle", "_loop", "_task", "_when", "expired")

    def __init__(self, when: float | None) -> None:
        """`when` on the running loop's clock; None: no deadline."""
        self._when = when
        self._loop = asyncio.get_running_loop()
        # The task while a step is awaited, else None.
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.Handle | None = None
        self._cancelling = 0
        self.expired = False

    def __enter__(self) -> StepDeadline:
        self.expired = False
        if self._when is None:
            return self
        task = asyncio.current_task(self._loop)
        if task is None:
            raise RuntimeError("StepDeadline must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        if self._handle is None:
            if self._when <= self._loop.time():
                # Past already (or it passed between steps): the step is
                # cancelled at its first suspension.
                self._handle = self._loop.call_soon(self._expire)
            else:
                self._handle = self._loop.call_at(self._when, self._expire)
        return self

    def _expire(self) -> None:
        self._handle = None
        task = self._task
        if task is None:
            return  # between steps: the next one is cancelled when it starts
        self.expired = True
        task.cancel()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._task = self._task, None
        if not self.expired or task is None:
            return
        # Our cancel is taken back; only when it was the only one is the step's
        # CancelledError a timeout (as asyncio.Timeout decides).
        if task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
            raise TimeoutError from exc

    def close(self) -> None:
        """No more steps: the timer, if armed, is cancelled."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
