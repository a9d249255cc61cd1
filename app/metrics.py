"""Prometheus metrics: `/metrics` (docs/operations.md, "Metrics").

Three kinds of series:

- **per call** (`call_done`, from the route's `done` callback): one counter
  increment and one or two histogram observations, on label children cached
  by their (bounded) label values, so the hot path pays a dict lookup, not
  prometheus_client's label validation;
- **per refusal** (`rejected`): front refusals by JSON-RPC code and status;
- **gauges** read from the live objects (pool, lanes, parked registry, listen
  hub, uvicorn's connection set) when a scrape asks: nothing is incremented
  and decremented at many places, so they cannot drift.

Every label value comes from a fixed set: methods the version registry knows
(anything else is `other`), registry version names, the outcomes the code
sets, our own status codes and error kinds. Nothing the client chooses (ids,
tool names, bogus methods) becomes a label.

The upstream part of a call is timed in app/call.py (`CallTiming`), below
every layer that marks it; `call_done` records what it measured. The live
objects are read through small protocols (`Sized` for the pool, `BridgeLike`,
`HubLike`), so this module imports none of them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import socket
from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, start_http_server
from prometheus_client.registry import Collector

from translators.registry import Version, get_version, known_versions

# Calls range from a cached discover (ms) to tools that run for minutes
# (MCP_SHIM_REQUEST_TIMEOUT_S defaults to 300 s).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

OTHER = "other"

# No `_created` series beside every counter and histogram: twice the series for
# a start timestamp that process_start_time_seconds already gives.
disable_created_metrics()  # type: ignore[no-untyped-call]

# Every method a client of some known version may send: the front refuses the rest.
METHODS: frozenset[str] = frozenset().union(*(v.features.client_requests for v in known_versions()))

# The upstream errors a call can end with (app/upstream/errors.py), by class name.
UPSTREAM_ERROR_KINDS = (
    "UpstreamUnavailable",
    "UpstreamTimeout",
    "UpstreamProtocolError",
    "UpstreamAnswerTooLarge",
    "UpstreamHttpError",
    "SessionExpired",
    "PoolExhausted",
    "SessionShareExceeded",
    # Large answers in flight held MCP_SHIM_MAX_ANSWER_BYTES_IN_FLIGHT (app/splice.py).
    "AnswerRoomFull",
    "StdioProcessExited",
    # The era probe a caller's call needed was refused with an answer naming no era.
    "EraInconclusive",
)

# `CallState.outcome` values the code sets (app/fronts/modern/gateway.py, app/mrtr/,
# app/subscriptions/listen.py; tests/unit/leaves/test_metrics.py checks the list against
# the source). "error <code>" carries the upstream's code: counted as "error".
# How a request relayed to the replica (or worker) owning its state ended
# (app/cluster/replicas.py), and what was owned there: fixed sets, so no relay can mint
# a label.
RELAY_ENDINGS = (
    "relayed",
    "owner_unreachable",
    "owner_broke_off",
    "client_disconnected",
    "client_stalled",
    # The connection went to the owner, a sibling worker (app/serving/handoff.py): no relay.
    "handed_off",
)
RELAY_OWNED = ("legacy_session", "sse_channel", "mrtr_call", "legacy_note")

OUTCOMES: frozenset[str] = frozenset(
    {
        "ok",
        "error",
        "rejected",
        "missing_capability",
        "cancelled",
        "client_disconnected",
        "upstream_closed",
        "upstream_401",
        "upstream_403",
        "input_required",
        "forwarded",
        "parked_full",
        "listening",
        "shutdown",
        "closed_shutdown",
        "closed_overflow",
        "closed_upstream",
        "closed_by_client",
        "pending",
        "internal_error",
        "deadline_exceeded",
        "client_stalled",
        "era_changed",
        "passed_through",
        "upstream_error",
        # A task-creating call beyond the tasks' own bounds (app/tasks/bounds.py).
        "task_limit",
        *UPSTREAM_ERROR_KINDS,
    }
)


def version_label(name: str) -> str:
    return name if get_version(name) is not None else OTHER


def outcome_label(outcome: str) -> str:
    if outcome.startswith("error "):
        return "error"
    return outcome if outcome in OUTCOMES else OTHER


def status_label(status: int) -> str:
    # Statuses are the gateway's own (app/rejections.py, app/upstream/errors.py,
    # relayed 401/403); the range check keeps a surprise from becoming a series.
    return str(status) if 100 <= status <= 599 else OTHER


# -- gauges read at scrape time ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class LiveState:
    """Readers of the live objects the gauges report (app/wiring.py wires them)."""

    sessions: Callable[[], int]
    lanes_busy: Callable[[], int]
    lanes_idle: Callable[[], int]
    parked: Callable[[], int]
    listen_streams: Callable[[], int]
    # Tasks (app/tasks/bridge.py): running, and what they hold of the upstream.
    tasks_live: Callable[[], int] = lambda: 0
    task_sessions: Callable[[], int] = lambda: 0
    task_connections: Callable[[], int] = lambda: 0


class LanesLike(Protocol):
    """What is read of the MRTR bridge's lanes (app/mrtr/lanes.py)."""

    @property
    def busy(self) -> int: ...

    @property
    def idle(self) -> int: ...


class BridgeLike(Protocol):
    """What is read of the MRTR bridge (app/mrtr/bridge.py)."""

    @property
    def lanes(self) -> LanesLike: ...

    @property
    def parked(self) -> int: ...


class HeldLike(Protocol):
    """What is read of the tasks' bounds (app/tasks/bounds.py)."""

    @property
    def sessions(self) -> int: ...

    @property
    def connections(self) -> int: ...


class TasksLike(Protocol):
    """What is read of the task bridge (app/tasks/bridge.py)."""

    @property
    def live_tasks(self) -> int: ...

    @property
    def bounds(self) -> HeldLike: ...


class HubLike(Protocol):
    """What is read of the subscriptions hub (app/subscriptions/hub.py)."""

    @property
    def active(self) -> int: ...


class ServerStateLike(Protocol):
    """What is read of uvicorn's `ServerState`: its live connection and task sets."""

    connections: set[Any]
    tasks: set[Any]


class _LiveCollector(Collector):
    """Gauges computed from live objects on each scrape. The objects belong to the
    event loop: a scrape from another thread (the separate metrics port) has the
    loop read them, so the values are consistent and no set changes under us."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.state: LiveState | None = None
        self.server: ServerStateLike | None = None

    def collect(self) -> Iterable[Metric]:
        loop = self.loop
        if loop is None:
            return []
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return self._read()
        answer: concurrent.futures.Future[list[Metric]] = concurrent.futures.Future()

        def read() -> None:
            try:
                answer.set_result(self._read())
            except BaseException as exc:  # reported in the scraping thread
                answer.set_exception(exc)

        try:
            loop.call_soon_threadsafe(read)
            return answer.result(timeout=5.0)
        except (RuntimeError, TimeoutError):
            return []  # the loop is gone or stuck: counters and histograms still answer

    def _read(self) -> list[Metric]:
        out: list[Metric] = []
        state = self.state
        if state is not None:
            out.append(
                _gauge(
                    "mcp_shim_upstream_sessions", "Upstream sessions in the pool", state.sessions
                )
            )
            lanes = GaugeMetricFamily(
                "mcp_shim_mrtr_lanes",
                "Upstream sessions of the MRTR bridge (lanes), busy with a call or idle",
                labels=["state"],
            )
            lanes.add_metric(["busy"], state.lanes_busy())
            lanes.add_metric(["idle"], state.lanes_idle())
            out.append(lanes)
            out.append(
                _gauge(
                    "mcp_shim_mrtr_parked",
                    "Calls parked by the MRTR bridge, waiting for the client's retry",
                    state.parked,
                )
            )
            out.append(
                _gauge(
                    "mcp_shim_listen_streams",
                    "Open subscriptions/listen streams",
                    state.listen_streams,
                )
            )
            out.append(
                _gauge(
                    "mcp_shim_tasks_live",
                    "Tasks this process follows upstream or runs itself, not yet settled "
                    "or expired",
                    state.tasks_live,
                )
            )
            out.append(
                _gauge(
                    "mcp_shim_task_upstream_sessions",
                    "Upstream sessions leased by tasks (MCP_SHIM_TASK_MAX_SESSIONS)",
                    state.task_sessions,
                )
            )
            out.append(
                _gauge(
                    "mcp_shim_task_upstream_connections",
                    "Upstream connections held open by tasks (MCP_SHIM_TASK_MAX_CONNECTIONS)",
                    state.task_connections,
                )
            )
        server = self.server
        if server is not None:
            out.append(
                _gauge(
                    "mcp_shim_client_connections",
                    "Open client connections to the gateway's main port",
                    lambda: len(server.connections),
                )
            )
            out.append(
                _gauge(
                    "mcp_shim_client_requests_in_progress",
                    "HTTP requests being served (client connections in use), streams included",
                    lambda: len(server.tasks),
                )
            )
        return out


def _left_out_counter(registry: CollectorRegistry) -> Counter:
    return Counter(  # made by the first server left out: only many servers have it
        "mcp_shim_aggregate_left_out",
        "Servers left out of an answer of the aggregated /mcp (a list, discovery): "
        "down, hung past MCP_SHIM_AGGREGATE_LIST_TIMEOUT_S, or refusing; by server "
        "(the servers file's names) and reason",
        ["server", "reason"],
        registry=registry,
    )


def _gauge(name: str, documentation: str, read: Callable[[], int]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=read())


# -- the metrics of one gateway ----------------------------------------------------


class Metrics:
    """The gateway's registry and its series (one per app: tests may run several)."""

    _left_out: Counter | None = None

    def __init__(self, *, process: bool = True) -> None:
        try:
            version = metadata.version("mcp-shim")
        except metadata.PackageNotFoundError:  # a source tree that was not installed
            version = "unknown"
        self.registry = CollectorRegistry(auto_describe=True)
        if process:
            ProcessCollector(registry=self.registry)
        Gauge(
            "mcp_shim_build_info",
            "Always 1: the running mcp-shim version",
            ["version"],
            registry=self.registry,
        ).labels(version).set(1)
        self._calls = Counter(
            "mcp_shim_calls",
            "Calls (POST /mcp requests that passed the front) by method, client version, "
            "outcome and HTTP status",
            ["method", "client_era", "client_version", "outcome", "status"],
            registry=self.registry,
        )
        self._duration = Histogram(
            "mcp_shim_call_duration_seconds",
            "Whole call, from the request's arrival to the end of its answer",
            ["method"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._upstream = Histogram(
            "mcp_shim_upstream_duration_seconds",
            "Upstream part of a call: from sending it upstream to the upstream's answer",
            ["method"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._upstream_errors = Counter(
            "mcp_shim_upstream_errors",
            "Calls ended by an upstream error, by kind",
            ["kind"],
            registry=self.registry,
        )
        self._rejections = Counter(
            "mcp_shim_rejections",
            "Requests refused by the front before any call started, by JSON-RPC code "
            "('none' for a 405 without a body) and HTTP status",
            ["code", "status"],
            registry=self.registry,
        )
        self._relays = Counter(
            "mcp_shim_replica_relays",
            "Requests handed to the replica or worker that owns their state (a legacy "
            "session, an HTTP+SSE channel, a parked MRTR call), by what is owned there "
            "and how the relay ended",
            ["owned", "ending"],
            registry=self.registry,
        )
        self._moved = Counter(
            "mcp_shim_connections_moved",
            "Idle keep-alive connections this worker handed to a sibling worker "
            "(app/serving/balance.py): gathered onto fewer workers under a light load, or "
            "spilled off a busy one",
            ["reason"],
            registry=self.registry,
        )
        self._relay_duration = Histogram(
            "mcp_shim_replica_relay_duration_seconds",
            "Relayed requests other than streams (a GET stream lasts as its client "
            "keeps it): from the relay's start to the end of the owner's answer",
            ["owned"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._live = _LiveCollector()
        self._server: MetricsServer | None = None
        self.registry.register(self._live)
        self._call_children: dict[tuple[str, str, str, str], Any] = {}
        self._duration_children: dict[str, Any] = {}
        self._upstream_children: dict[str, Any] = {}
        # Present at 0 from the start, so a rate() has a series before the first error.
        self._error_children = {k: self._upstream_errors.labels(k) for k in UPSTREAM_ERROR_KINDS}

    # -- hot path ---------------------------------------------------------------

    def call_done(
        self,
        method: str,
        version: Version,
        outcome: str,
        status: int,
        duration_s: float,
        upstream_s: float | None,
    ) -> None:
        method = method if method in METHODS else OTHER
        outcome = outcome_label(outcome)
        key = (method, version.name, outcome, str(status))
        child = self._call_children.get(key)
        if child is None:
            child = self._calls.labels(
                method,
                version.era.value,
                version_label(version.name),
                outcome,
                status_label(status),
            )
            self._call_children[key] = child
        child.inc()
        duration = self._duration_children.get(method)
        if duration is None:
            duration = self._duration_children[method] = self._duration.labels(method)
        duration.observe(duration_s)
        if upstream_s is not None:
            upstream = self._upstream_children.get(method)
            if upstream is None:
                upstream = self._upstream_children[method] = self._upstream.labels(method)
            upstream.observe(upstream_s)
        if outcome in self._error_children:
            self._error_children[outcome].inc()

    def relayed(self, owned: str, ending: str, duration_s: float, stream: bool) -> None:
        """A request relayed to its state's owner (app/cluster/replicas.py), ended."""
        ending = ending.partition(":")[0]  # owner_broke_off:<exception>
        self._relays.labels(
            owned if owned in RELAY_OWNED else OTHER,
            ending if ending in RELAY_ENDINGS else OTHER,
        ).inc()
        if not stream and ending != "handed_off":
            self._relay_duration.labels(owned if owned in RELAY_OWNED else OTHER).observe(
                duration_s
            )

    def connections_moved(self, reason: str, count: int) -> None:
        """Connections handed to a sibling worker by the balancer (app/serving/balance.py)."""
        self._moved.labels(reason if reason in ("gather", "spill") else OTHER).inc(count)

    def aggregate_left_out(self, server: str, reason: str) -> None:
        """A server left out of an aggregated answer (app/servers/aggregate/members.py)."""
        if self._left_out is None:
            self._left_out = _left_out_counter(self.registry)
        self._left_out.labels(server, reason).inc()

    def rejected(self, code: int | None, status: int) -> None:
        """A front refusal (the `request_refused` / `request_rejected` log events)."""
        self._rejections.labels("none" if code is None else str(code), status_label(status)).inc()

    # -- live objects -------------------------------------------------------------

    def start(
        self,
        pool: Sized,
        bridge: BridgeLike,
        subscriptions: HubLike,
        host: str,
        port: int | None,
        tasks: TasksLike | None = None,
    ) -> None:
        """At the app's start: report the gateway's live objects, and serve the
        metrics on `port` if one is set (MCP_SHIM_METRICS_PORT)."""
        state = LiveState(
            sessions=lambda: len(pool),
            lanes_busy=lambda: bridge.lanes.busy,
            lanes_idle=lambda: bridge.lanes.idle,
            parked=lambda: bridge.parked,
            listen_streams=lambda: subscriptions.active,
        )
        if tasks is not None:
            state = dataclasses.replace(
                state,
                tasks_live=lambda: tasks.live_tasks,
                task_sessions=lambda: tasks.bounds.sessions,
                task_connections=lambda: tasks.bounds.connections,
            )
        self.watch(state)
        if port is not None:
            self._server = self.serve(host, port)

    async def stop(self) -> None:
        self.unwatch()
        server, self._server = self._server, None
        if server is not None:
            await server.aclose()

    def watch(self, state: LiveState) -> None:
        """Report these live objects from now on (the app's lifespan start)."""
        self._live.loop = asyncio.get_running_loop()
        self._live.state = state

    def watch_server(self, server: ServerStateLike) -> None:
        """uvicorn's ServerState of the main port: open connections, requests in progress."""
        self._live.server = server

    def unwatch(self) -> None:
        self._live.state = None
        self._live.server = None
        self._live.loop = None

    # -- exposition ---------------------------------------------------------------

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition for a scrape with this Accept header: body, content type."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def serve(self, host: str, port: int) -> MetricsServer:
        """/metrics on a port of its own (MCP_SHIM_METRICS_PORT)."""
        httpd, thread = start_http_server(port, addr=host, registry=self.registry)
        return MetricsServer(httpd, thread)


class MetricsServer:
    """prometheus_client's own HTTP server, in a daemon thread: a scrape never
    waits for the event loop except to read the gauges."""

    def __init__(self, httpd: Any, thread: Any) -> None:
        self._httpd = httpd
        self._thread = thread

    async def aclose(self) -> None:
        # shutdown() waits for serve_forever's poll loop: not on the event loop.
        await asyncio.to_thread(self._httpd.shutdown)
        self._httpd.server_close()
        self._thread.join(timeout=2.0)


def check_port(host: str, port: int | None) -> None:
    """Fail before start-up, naming the variable, when MCP_SHIM_METRICS_PORT cannot
    be listened on (the app's start would otherwise fail with a traceback)."""
    if port is None:
        return
    from app.config import SettingsError

    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise SettingsError(
            f"invalid configuration:\n  MCP_SHIM_METRICS_PORT: cannot listen on {host}:{port} "
            f"({exc.strerror})"
        ) from None


def parse_exposition(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample in a text exposition (tests, bench)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            yield sample.name, dict(sample.labels), sample.value
