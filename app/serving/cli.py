"""`mcp-shim`: start the gateway with settings from the environment."""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import dataclasses
import difflib
import functools
import os
import resource
import socket
import sys
from collections.abc import Awaitable, Callable, Collection
from importlib import metadata

import structlog
import uvicorn
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app import jsonio, logs, metrics, probe, wiring
from app.config import Settings, SettingsError
from app.rejections import INVALID_REQUEST, Rejection
from app.serving import state_key, workers
from app.serving.accept_gate import AcceptGate
from app.serving.balance import Balancer, Siblings
from app.serving.handoff import Handoff
from app.serving.http_protocol import ConnectionLimits, GuardedHttpToolsProtocol, protocol_class
from app.serving.load_board import CANCELS_WITHHELD
from app.serving.server import GatewayApp, create_app, drain
from app.settings import command as settings_command
from app.settings import servers
from app.settings.load import Loaded, load, load_settings
from app.upstream.base import server_pids, share_cancel_stop
from app.wiring import Wiring


class GracefulServer(uvicorn.Server):
    """uvicorn, ending long-lived listen streams properly on SIGTERM/SIGINT.

    uvicorn's shutdown stops accepting, waits for open responses up to
    timeout_graceful_shutdown and then cancels them; lifespan shutdown only
    runs afterwards. `drain` first sends each subscriptions/listen stream its
    graceful closing result, so the wait below finds them finished.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        app: GatewayApp,
        handoff: Handoff | None = None,
        siblings: Siblings | None = None,
    ) -> None:
        super().__init__(config)
        self._app = app
        self._handoff = handoff
        self._siblings = siblings
        self._balancer: Balancer | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # One server's graph, or every server's of a servers file (app/servers):
        # each worker runs them all, in the same order.
        graphs = self._app.graphs()
        if self._handoff is not None and graphs and not self.should_exit:
            # Connections siblings hand over are served as this server's own.
            self._handoff.start(self._create_protocol())
            board = self._siblings.board if self._siblings is not None else None
            for index, wired in enumerate(graphs):
                if wired.settings.upstream_command is not None or wired.replicas.relay.hand_over:
                    # A stdio session's requests go to the worker running its server.
                    wired.replicas.relay.handoff = self._handoff
                if board is not None:
                    # Each server's own: one server's dying process stops no other's cancels.
                    flag = board.flag(CANCELS_WITHHELD + index)
                    share_cancel_stop(wired.upstream.transport, flag)
            if graphs[0].settings.move_connections:
                self._balancer = self._start_balancer(graphs, sockets)
        release_free_heap()

    def _start_balancer(
        self, graphs: list[Wiring], sockets: list[socket.socket] | None
    ) -> Balancer | None:
        if self._handoff is None or self._siblings is None or self._siblings.board is None:
            return None
        pid_lists = [p for w in graphs if (p := server_pids(w.upstream.transport)) is not None]

        def every_server_pid() -> list[int]:
            return [pid for pids in pid_lists for pid in pids()]

        balancer = self._siblings.balancer(
            self._handoff,
            self.server_state.connections,
            port=graphs[0].settings.port,
            # A connection naming a session moves only where every server's
            # sessions are served by any worker.
            sessions_anywhere=all(w.legacy_sessions.copies.joins for w in graphs),
            moved=self._app.state.metrics.connections_moved,
            gate=self._accept_gate(sockets),
            server_pids=every_server_pid if pid_lists else None,
        )
        balancer.start(asyncio.get_running_loop())
        return balancer

    def _create_protocol(self) -> Callable[[], GuardedHttpToolsProtocol]:
        """uvicorn's own create_protocol, as it builds it in startup(): the
        class is always ours (serve())."""
        protocol = self.config.http_protocol_class
        assert isinstance(protocol, type) and issubclass(protocol, GuardedHttpToolsProtocol)
        return functools.partial(
            protocol,
            config=self.config,
            server_state=self.server_state,
            app_state=self.lifespan.state,
        )

    def _accept_gate(self, sockets: list[socket.socket] | None) -> AcceptGate | None:
        """Worker 0 always accepts; the others stop while their load is gathered
        on a lower-numbered worker. sockets[0] is the shared port (run_worker)."""
        if not sockets or self._siblings is None or self._siblings.me == 0:
            return None
        loop = asyncio.get_running_loop()
        create_protocol = self._create_protocol()

        def open_server(sock: socket.socket) -> Awaitable[asyncio.AbstractServer]:
            return loop.create_server(create_protocol, sock=sock, backlog=self.config.backlog)

        return AcceptGate(self.servers, 0, sockets[0], open_server)  # type: ignore[arg-type]

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._balancer is not None:
            self._balancer.stop()
        if self._handoff is not None:
            self._handoff.close()
        await drain(self._app)
        await super().shutdown(sockets)


def check_listen_address(settings: Settings) -> None:
    """Fail before start-up, naming the variable, when the gateway cannot listen:
    uvicorn would only say so after the application started."""
    try:
        infos = socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise SettingsError(
            f"invalid configuration:\n  MCP_SHIM_HOST: cannot resolve {settings.host!r} "
            f"({exc.strerror})"
        ) from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise SettingsError(
                "invalid configuration:\n  MCP_SHIM_HOST/MCP_SHIM_PORT: cannot listen on "
                f"{settings.host}:{settings.port} ({exc.strerror})"
            ) from None


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
_MMAP_THRESHOLD = 128 * 1024


def _libc() -> ctypes.CDLL | None:
    """The C library's functions, or None where they cannot be reached. dlopen(NULL):
    the symbols the interpreter already links, without ctypes.util's search (which
    runs `ldconfig -p` in a child process)."""
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def fix_mmap_threshold() -> None:
    """Large buffers (request bodies, upstream answers, serialised results) are
    mmapped, and so given back to the system when freed.

    glibc raises its mmap threshold each time such a buffer is freed; later
    ones then come from the heap, where fragmentation keeps them: RSS grew by
    ~50 MB per round of 20 concurrent 3 MB calls and never came back down.
    Setting the threshold fixes it at glibc's initial value. Not glibc: nothing."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


def release_free_heap() -> None:
    """Give the pages of glibc's heap that start-up freed back to the system, once.

    glibc returns only the top of its heap by itself; what start-up frees in
    the middle (aiohttp's import-time TLS contexts, replaced in
    app/upstream/httpclient/tls.py, and the imports' temporary objects) stays resident
    until reused: 0.8 MB of idle RSS (bench/memory.py; docs/performance.md).
    `malloc_trim(0)` releases those pages; a later allocation
    takes them back from the system as needed. Not glibc: nothing."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


# File descriptors kept for everything but client and upstream connections:
# the listening socket, stdio, the event loop's own, DNS lookups.
_FD_RESERVE = 64


def connection_limits(settings: Settings) -> ConnectionLimits:
    """The client-connection bound, kept within the file-descriptor limit: above
    it, accept() fails and new clients are dropped before any code of ours runs.

    The soft RLIMIT_NOFILE is raised to the hard one first. Upstream
    connections are given MCP_SHIM_MAX_UPSTREAM_CONNECTIONS per pool (two with
    the h1 transport: its own for the session POSTs and one-off requests, and
    its GETs' for a legacy upstream or aiohttp's for a modern one's pass-through)
    or half the room, whichever is less; if the client bound does not fit in
    the rest, it is lowered to it (and a warning says so)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    bound = settings.max_connections
    if soft != resource.RLIM_INFINITY:
        room = soft - _FD_RESERVE
        pools = 2 if settings.upstream_http_transport == "h1" else 1
        upstream = min(pools * settings.max_upstream_connections, room // 2)
        if bound > room - upstream:
            bound = max(1, room - upstream)
            structlog.get_logger("mcp_shim.connections").warning(
                "connection_limit_lowered",
                setting="MCP_SHIM_MAX_CONNECTIONS",
                configured=settings.max_connections,
                effective=bound,
                fd_limit=soft,
                max_upstream_connections=settings.max_upstream_connections,
                hint="raise the file-descriptor limit (ulimit -n) or lower "
                "MCP_SHIM_MAX_CONNECTIONS / MCP_SHIM_MAX_UPSTREAM_CONNECTIONS",
            )
    return ConnectionLimits(
        max_connections=bound,
        read_timeout_s=settings.read_timeout_s,
        write_timeout_s=settings.write_timeout_s,
    )


_DESCRIPTION = """\
Run the mcp-shim gateway: an HTTP endpoint (POST /mcp) that lets MCP clients
of any protocol revision use an MCP server of another revision.

Settings are MCP_SHIM_* environment variables; the few people type are flags
too, each equal to its variable (a flag wins). The upstream (required) is
MCP_SHIM_UPSTREAM_URL (--upstream), the MCP endpoint of the server behind the
gateway, e.g. http://127.0.0.1:3001/mcp, or MCP_SHIM_UPSTREAM_COMMAND (--stdio),
a stdio server the gateway starts. MCP_SHIM_HOST and MCP_SHIM_PORT (--host,
--port; default 127.0.0.1:8080) are where the gateway listens. An MCP_SHIM_*
variable that is no setting stops start-up (exit 2) naming the closest one.
`mcp-shim config` prints every effective setting and where it came from. Every
variable is listed in docs/settings.md; the few most deployments need are in
README.md."""

_EPILOG = """\
examples:
  MCP_SHIM_UPSTREAM_URL=http://127.0.0.1:3001/mcp mcp-shim
  mcp-shim --upstream http://127.0.0.1:3001/mcp --port 9000
  mcp-shim --stdio "npx -y @modelcontextprotocol/server-memory"
  mcp-shim config --port 9000"""

# The commands people run; `worker` is the supervisor's own (app/serving/workers.py).
COMMANDS = ("serve", "probe", "config")
_WORKER = "worker"


def _version() -> str:
    try:
        return metadata.version("mcp-shim")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


def _command_word(argv: list[str]) -> str | None:
    """The first argument that is neither an option nor an option's value: the
    command, if any. Options are never abbreviated (allow_abbrev=False), so
    the ones taking a value are known exactly."""
    takes_value = {state_key.FD_OPTION, *(flag.option for flag in settings_command.FLAGS)}
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--":
            return None
        elif arg.startswith("-"):
            skip = arg in takes_value
        else:
            return arg
    return None


def not_a_command(word: str) -> str:
    """The error for `mcp-shim WORD` where WORD is no command: the commands, and
    the flag or variable WORD was most likely meant for."""
    message = f"{word!r} is not a command; the commands are serve (the default), probe and config"
    guess = difflib.get_close_matches(word, COMMANDS, n=1)
    if guess:
        return f"{message}. Did you mean {guess[0]}?"
    if word.isdigit():
        hint = f"--port {word} or MCP_SHIM_PORT={word}"
    elif "://" in word or "/" in word:
        hint = f"--upstream {word} or MCP_SHIM_UPSTREAM_URL={word}"
    else:
        hint = "--upstream URL, --stdio 'CMD ARGS', --port PORT (see --help)"
    return f"{message}. Settings are flags or MCP_SHIM_* variables, e.g. {hint}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-shim",
        usage="%(prog)s [-h] [--version] [--host HOST] [--port PORT] "
        "[--upstream URL | --stdio 'CMD ARGS'] [--workers N] [--config FILE]\n"
        "                [serve | probe [--json] [--timeout SECONDS] | config [--json]]",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"mcp-shim {_version()}")
    # Internal: MCP_SHIM_STATE_KEY comes from this descriptor (app/serving/state_key.py).
    parser.add_argument(state_key.FD_OPTION, type=int, help=argparse.SUPPRESS)
    settings_command.add_flags(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    # A subcommand from the start, so that others (a `probe`) can join it.
    serve_parser = commands.add_parser(
        "serve",
        prog="mcp-shim serve",
        help="run the gateway (the default when no command is given)",
        allow_abbrev=False,
    )
    settings_command.add_flags(serve_parser, suppress_defaults=True)
    probe_parser = commands.add_parser(
        "probe",
        prog="mcp-shim probe",
        help="connect to the upstream once, as the gateway would, and report what is there",
        description=probe.DESCRIPTION,
        epilog=probe.EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    probe.add_arguments(probe_parser)
    settings_command.add_flags(probe_parser, suppress_defaults=True)
    config_parser = commands.add_parser(
        "config",
        prog="mcp-shim config",
        help="print every effective setting, its value and where it came from",
        description=settings_command.CONFIG_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    settings_command.add_config_arguments(config_parser)
    settings_command.add_flags(config_parser, suppress_defaults=True)
    return parser


def _worker_parser() -> argparse.ArgumentParser:
    """A worker process of MCP_SHIM_WORKERS > 1, started by the supervisor
    (app/serving/workers.py): a parser of its own, so that neither --help nor an error
    message names it. Its settings come from the environment the supervisor
    passes on (flags included, applied there)."""
    worker = argparse.ArgumentParser(prog="mcp-shim worker", allow_abbrev=False)
    worker.add_argument(state_key.FD_OPTION, type=int)
    worker.add_argument("command", choices=[_WORKER])
    worker.add_argument("--index", type=int, required=True)
    worker.add_argument("--listen-fd", type=int, required=True)
    worker.add_argument("--internal-fd", type=int, required=True)
    worker.add_argument("--metrics-internal-only", action="store_true")
    # Connections handed between workers (app/serving/handoff.py): its inbox, each sibling's outbox.
    worker.add_argument("--handoff-inbox", type=int, default=None)
    worker.add_argument("--handoff-outbox", action="append", default=[], metavar="URL=FD")
    # Moving idle connections between workers (app/serving/balance.py): the siblings'
    # indexes and the shared load table.
    worker.add_argument("--sibling", action="append", default=[], metavar="INDEX=URL")
    worker.add_argument("--load-board", default=None, metavar="FD:SLOTS")
    return worker


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: --help, --version, the setting flags and the `serve`,
    `probe` and `config` subcommands. Anything else exits 2 with a message."""
    arguments = sys.argv[1:] if argv is None else argv
    word = _command_word(arguments)
    if word == _WORKER:
        return _worker_parser().parse_args(arguments)
    parser = _parser()
    if word is not None and word not in COMMANDS:
        parser.error(not_a_command(word))
    return parser.parse_args(arguments)


class NotOnMainPort:
    """ASGI: `/metrics` refused (the app's own 404) on the shared port. A worker whose
    supervisor serves MCP_SHIM_METRICS_PORT runs without that setting, so its app
    has the route; the supervisor reads it on the worker's internal listener, and
    the port that publishes /mcp must not publish the metrics with it."""

    def __init__(self, app: ASGIApp, port: int) -> None:
        self.app = app
        self._port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        if (
            scope["type"] == "http"
            and scope["path"] == "/metrics"
            and server is not None
            and server[1] == self._port
        ):
            rejection = Rejection(
                INVALID_REQUEST, "Not found: the MCP endpoint is POST /mcp", status=404
            )
            answer = Response(
                jsonio.dumps(rejection.to_message()), status_code=404, media_type="application/json"
            )
            await answer(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _gateway_app(settings: Settings) -> GatewayApp:
    """One server's app, or many servers' (app/servers/). The many-servers
    package is imported only when a servers file asks for it: a single-server
    gateway's idle memory stays within tests/integration/test_memory.py's bound."""
    listed = servers.read_servers(settings)
    if listed is None:
        return create_app(settings)
    from app.servers.app import create_servers_app

    return create_servers_app(settings, listed)


def serve(
    settings: Settings,
    sockets: list[socket.socket] | None = None,
    *,
    metrics_internal_only: bool = False,
    handoff: Handoff | None = None,
    siblings: Siblings | None = None,
) -> None:
    """The gateway in this process: on MCP_SHIM_HOST:MCP_SHIM_PORT, or on the given
    listening sockets (a worker's: the shared port and its internal listener)."""
    app = _gateway_app(settings)
    served: ASGIApp = NotOnMainPort(app, settings.port) if metrics_internal_only else app
    config = uvicorn.Config(
        served,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        # httptools, with read and write timeouts and a connection bound
        # (app/serving/http_protocol.py).
        http=protocol_class(connection_limits(settings)),
        log_config=None,
        access_log=False,
        lifespan="on",
        # Idle keep-alive connections only; a request being read is bounded by
        # MCP_SHIM_READ_TIMEOUT_S in the protocol.
        timeout_keep_alive=30,
        timeout_graceful_shutdown=10,
    )
    fix_mmap_threshold()
    server = GracefulServer(config, app, handoff, siblings)
    app.state.metrics.watch_server(server.server_state)  # open connections, requests served
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:
        # uvicorn re-raises Ctrl-C after its graceful shutdown; nothing is wrong.
        sys.exit(130)
    if not server.started:
        sys.exit(3)  # uvicorn's STARTUP_FAILURE, as uvicorn.run does


def run_worker(args: argparse.Namespace, key: str | None) -> None:
    """One of MCP_SHIM_WORKERS processes, started by the supervisor (app/serving/workers.py)
    with the shared listening socket and its own internal one, and the state key."""
    try:
        settings = load_settings(state_key=key)
    except SettingsError as exc:
        print(f"mcp-shim worker {args.index}: {exc}", file=sys.stderr)
        sys.exit(2)
    logs.configure(settings.log_level, worker=args.index)
    # One start line per gateway: worker 0's (app/wiring.py).
    wiring.announce = args.index == 0
    sockets = [socket.socket(fileno=args.listen_fd), socket.socket(fileno=args.internal_fd)]
    handoff = None
    if args.handoff_inbox is not None:
        outboxes = dict(item.rsplit("=", 1) for item in args.handoff_outbox)
        handoff = Handoff(args.handoff_inbox, {url: int(fd) for url, fd in outboxes.items()})
    siblings = Siblings.parse(args.index, args.sibling, args.load_board)
    serve(
        settings,
        sockets,
        metrics_internal_only=args.metrics_internal_only,
        handoff=handoff,
        siblings=siblings,
    )


def received_state_key(args: argparse.Namespace) -> str | None:
    """MCP_SHIM_STATE_KEY when handed over by a descriptor (app/serving/state_key.py),
    which is closed before anything else starts."""
    if args.state_key_fd is None:
        return None
    try:
        return state_key.take(args.state_key_fd)
    except SettingsError as exc:
        print(f"mcp-shim: {exc}", file=sys.stderr)
        sys.exit(2)


def checked_settings(key: str | None, flags: Collection[str] = ()) -> Loaded:
    """The settings every command runs with, checked as `serve` checks them
    (unknown variables, every value, the workers' ports); exit 2 with the
    message otherwise. Whether the address can be listened on is serve's alone:
    a probe or `config` beside a running gateway must not fail for its port."""
    try:
        loaded = load(state_key=key)
        # A servers file: every server's settings checked now.
        loaded = dataclasses.replace(loaded, settings=servers.settled(loaded.settings))
        settings = loaded.settings
        workers.worker_addresses(settings, workers.worker_count(settings))
    except SettingsError as exc:
        print(f"mcp-shim: {settings_command.with_flag_names(str(exc), flags)}", file=sys.stderr)
        sys.exit(2)
    return loaded


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    key = received_state_key(args)
    if args.command == "worker":
        run_worker(args, key)
        return
    # The key in this process's environment: it is replaced by a process without
    # it (app/serving/state_key.py), or stdio servers could read it in /proc/<pid>/environ.
    in_environ = state_key.ENV_NAME in os.environ
    arguments = sys.argv[1:] if argv is None else argv
    from_environment = {name.upper() for name in os.environ}
    flags = settings_command.apply_flags(args, os.environ)
    loaded = checked_settings(key, flags)
    settings = loaded.settings
    if args.command == "config":
        table = settings_command.rows(loaded, flags, from_environment)
        render = settings_command.as_json if args.json else settings_command.render
        print(render(table))
        return
    if args.command == "probe":
        if in_environ:
            state_key.exec_module("app.serving.cli", arguments, None)  # the probe has no use for it
        sys.exit(probe.main(args))
    try:
        check_listen_address(settings)
        metrics.check_port(settings.host, settings.metrics_port)
    except SettingsError as exc:
        print(f"mcp-shim: {exc}", file=sys.stderr)
        sys.exit(2)
    secret = settings.state_key
    key = None if secret is None else secret.get_secret_value()  # validated: fits the pipe
    if workers.worker_count(settings) > 1:
        # The supervisor in a fresh interpreter that imports only what it needs
        # (38 MB of RSS instead of this one's 70: the app's modules are the
        # workers'). Same process id, so it may be PID 1 of a container. The
        # key, if any, by a descriptor as well; the flags are in the environment.
        state_key.exec_module("app.serving.workers", [], key)
    if in_environ:
        state_key.exec_module("app.serving.cli", arguments, key)
    logs.configure(settings.log_level)
    workers.log_worker_count(settings)
    # One worker: this process serves, with no supervisor and no extra hop.
    serve(settings)


if __name__ == "__main__":
    main()
