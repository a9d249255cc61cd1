"""The long fuzz run: hostile messages at a real gateway in front of the real legacy fixture.

    .venv/bin/python scripts/fuzz.py --messages 10000 --legacy-messages 10000 [--seed 7] [--out DIR]

Starts the legacy fixture server (.peers/legacy) and the gateway as processes
on loopback, then sends, each on its own connection, the probes the suite's
bounded tests use, to three targets in turn:

- `modern`: 2026-07-28 messages on `POST /mcp` (tests/fuzzing.py);
- `legacy-mcp`: legacy messages and JSON-RPC batches on `POST /mcp` of a
  2025-03-26 session, and `messages`: the same on `POST /messages` of a
  2024-11-05 HTTP+SSE channel whose stream is read in a thread
  (tests/fuzzing_legacy.py draws which of the two each probe goes to).

Every `--canary-every` messages a conforming `tools/call` must still succeed
(other callers are unaffected) and, in the legacy part, every request the
channel accepted must have had its one answer on the stream. Prints the counts
per target (messages, per HTTP status, per JSON-RPC answer, per method or batch
size, per mutation, failures grouped by cause with one reproducer each) and RSS,
and writes them as JSON to DIR/fuzz-summary.json with every failing probe in
DIR/failures.jsonl. Exits 1 on any failure, if the gateway dies, or if its RSS
grows past the bound.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests import fuzzing, fuzzing_legacy, procs  # noqa: E402
from tests.integration.test_legacy_clients import initialize  # noqa: E402

TARGETS = {
    "modern": "2026-07-28 messages, POST /mcp",
    "legacy-mcp": "2025-03-26 session, POST /mcp (single messages and batches)",
    "messages": "2024-11-05 HTTP+SSE channel, POST /messages (single messages and batches)",
}


@dataclass
class Tally:
    """The counts of one target."""

    sent: int = 0
    status: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    methods: Counter[str] = field(default_factory=Counter)
    mutations: Counter[str] = field(default_factory=Counter)
    causes: Counter[str] = field(default_factory=Counter)
    first: dict[str, dict[str, Any]] = field(default_factory=dict)
    slowest: float = 0.0

    def count(self, probe: fuzzing.Probe, answer: fuzzing.Answer, codes: list[str]) -> None:
        self.sent += 1
        self.slowest = max(self.slowest, answer.seconds)
        self.status[str(answer.status) if answer.error is None else "no answer"] += 1
        for mutation in probe.mutations or ["none"]:
            self.mutations[
                " ".join(mutation.split()[:2])
                if mutation.startswith("header")
                else mutation.split()[0]
            ] += 1
        self.codes.update(codes)

    def summary(self) -> dict[str, Any]:
        return {
            "messages_sent": self.sent,
            "slowest_answer_s": round(self.slowest, 2),
            "per_status": dict(self.status.most_common()),
            "per_answer": dict(self.codes.most_common()),
            "per_method": dict(self.methods.most_common()),
            "per_mutation": dict(self.mutations.most_common()),
            "failures": sum(self.causes.values()),
            "failures_by_cause": dict(self.causes.most_common()),
            "reproducers": self.first,
        }


class Run:
    def __init__(self, port: int, pid: int, out: Path, canary_every: int) -> None:
        self.port = port
        self.pid = pid
        self.out = out
        self.canary_every = canary_every
        self.sent = 0
        self.targets = {name: Tally() for name in TARGETS}
        self.canaries = 0
        self.canary_failures: list[str] = []
        self.rss: list[tuple[int, int]] = []
        self.died = False
        self.channel: fuzzing_legacy.Channel | None = None
        self.workers = fuzzing.children(pid)
        self.owed = 0  # answers the channel's stream owes, in all
        (out / "failures.jsonl").write_text("")

    def one(self, probe: fuzzing.Probe) -> None:
        """A 2026-07-28 probe, judged by tests.fuzzing.check."""
        if self.died:
            return
        answer = fuzzing.send(self.port, probe)
        tally = self.targets["modern"]
        tally.count(probe, answer, [_code(answer)])
        tally.methods[("notification " if probe.notification else "") + str(probe.method)[:40]] += 1
        failures = fuzzing.check(probe, answer)
        if failures:
            self.record("modern", fuzzing.failure_cause(probe, failures), probe, answer, failures)
        self.after(probe, answer, "modern")

    def one_legacy(self, probe: fuzzing_legacy.LegacyProbe) -> None:
        """A legacy probe (a message or a batch), judged by tests.fuzzing_legacy.check."""
        if self.died:
            return
        answer = fuzzing.send(self.port, probe)
        target = "legacy-mcp" if probe.route == "/mcp" else "messages"
        tally = self.targets[target]
        tally.count(probe, answer, _legacy_codes(answer))
        tally.methods[_legacy_kind(probe)] += 1
        self.owed += fuzzing_legacy.accepted_requests(probe, answer)
        failures = fuzzing_legacy.check(probe, answer)
        if failures:
            self.record(target, _kinds(failures), probe, answer, failures)
        self.after(probe, answer, target)

    def after(self, probe: fuzzing.Probe, answer: fuzzing.Answer, target: str) -> None:
        """What every probe is followed by: the process alive, RSS, the canaries."""
        self.sent += 1
        if not fuzzing.process_alive(self.pid, self.workers):
            self.died = True
            why = "the gateway or one of its workers died: " + self.last_words()
            self.record(target, "died", probe, answer, [why])
            return
        if self.sent % 250 == 0:
            self.rss.append((self.sent, fuzzing.rss_kib(self.pid)))
        if self.sent % self.canary_every == 0:
            self.canary()
        if self.sent % 1000 == 0:
            failed = sum(sum(t.causes.values()) for t in self.targets.values())
            print(
                f"  {self.sent} sent, {failed} failures, "
                f"RSS {fuzzing.rss_kib(self.pid) // 1024} MiB",
                flush=True,
            )

    def last_words(self) -> str:
        """Why the gateway ended, from its log: a signal ("Shutting down", sent
        from outside) or a crash (a traceback, an error line)."""
        lines = (self.out / "gateway.log").read_text(errors="replace").splitlines()[-40:]
        telling = [
            line
            for line in lines
            if any(w in line for w in ("Shutting down", "Traceback", '"error"', "Killed", "exited"))
        ]
        return " | ".join(telling)[-600:] or "no clue in the last 40 log lines"

    def canary(self) -> None:
        self.canaries += 1
        problem = fuzzing.canary(self.port)
        if problem is not None:
            self.canary_failures.append(f"after {self.sent} messages: {problem}")
        if self.channel is not None:
            self.settle()

    def settle(self) -> None:
        """Every request the channel accepted has had its one answer on the stream."""
        assert self.channel is not None
        problem = self.channel.settled(self.owed)
        if problem is None:
            return
        tally = self.targets["messages"]
        tally.causes["channel"] += 1
        tally.first.setdefault("channel", {"failures": [f"after {self.sent} messages: {problem}"]})
        with (self.out / "failures.jsonl").open("a") as f:
            entry = {"target": "messages", "channel": problem, "sent": self.sent}
            f.write(json.dumps(entry) + "\n")
        self.owed = self.channel.answers  # judge what follows on its own

    def record(
        self,
        target: str,
        cause: str,
        probe: fuzzing.Probe,
        answer: fuzzing.Answer,
        failures: list[str],
    ) -> None:
        tally = self.targets[target]
        tally.causes[cause] += 1
        entry = {
            "target": target,
            "failures": failures,
            "status": answer.status,
            "answer_error": answer.error,
            "answer_headers": answer.headers,
            "answer_body": answer.body[:600].decode("utf-8", "replace"),
            "probe": probe.reproducer(),
        }
        if cause not in tally.first or len(probe.body) < tally.first[cause]["probe"]["body_len"]:
            tally.first[cause] = entry
        with (self.out / "failures.jsonl").open("a") as f:
            f.write(json.dumps(entry) + "\n")


def _kinds(failures: list[str]) -> str:
    return " + ".join(sorted({failure.split(":", 1)[0] for failure in failures}))


def _code(answer: fuzzing.Answer) -> str:
    if answer.error is not None or not answer.body:
        return "-"
    try:
        messages = fuzzing.answer_messages(answer)
    except ValueError:
        return "not JSON-RPC"
    if not messages or not isinstance(messages[-1], dict):
        return "not JSON-RPC"
    return _message_code(messages[-1])


def _message_code(final: dict[str, Any]) -> str:
    if "error" in final and isinstance(final["error"], dict):
        return str(final["error"].get("code"))
    if "result" in final:
        kind = final["result"].get("resultType") if isinstance(final["result"], dict) else None
        return f"result ({kind})" if kind else "result"
    if "method" in final:
        return f"notification {final['method']}"
    return "other"


def _legacy_codes(answer: fuzzing.Answer) -> list[str]:
    """One entry per JSON-RPC message in the answer (a batch's answer has many)."""
    if answer.error is not None:
        return ["no answer"]
    if not answer.body:
        return [f"no body ({answer.status})"]
    try:
        if answer.content_type == "application/json":
            body = json.loads(answer.body)
            messages = body if isinstance(body, list) else [body]
        else:
            messages = fuzzing.answer_messages(answer)
    except ValueError:
        return ["not JSON-RPC"]
    return [_message_code(m) if isinstance(m, dict) else "not JSON-RPC" for m in messages]


def _legacy_kind(probe: fuzzing_legacy.LegacyProbe) -> str:
    """A batch by its size (around MCP_SHIM_MAX_BATCH), a single message by its method."""
    shape = "mutated" if probe.expected is None else "unmutated"
    body = fuzzing._loads(probe.body)
    if probe.method == "batch":
        size = f"{len(body)} members" if isinstance(body, list) else "no longer a batch"
        return f"batch, {size} ({shape})"
    if probe.notification:
        return f"notification ({shape})"
    return f"{probe.method or 'not JSON-RPC'} ({shape})"


def _drive(
    strategy: st.SearchStrategy[Any], count: int, seed_value: int, each: Callable[[Any], None]
) -> None:
    """`count` examples of `strategy` (same seed, same messages), no shrinking."""
    if count <= 0:
        return

    @seed(seed_value)
    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def drive(probe: Any) -> None:
        each(probe)

    drive()


def _legacy_part(run: Run, count: int, seed_value: int) -> None:
    """A 2025-03-26 session and a 2024-11-05 channel opened as a client does, then
    `count` legacy probes shared between them."""
    base = f"http://127.0.0.1:{run.port}"
    with httpx.Client(timeout=15.0) as client:
        session, _ = initialize(client, base + "/mcp", fuzzing_legacy.SESSION_VERSION)
    run.channel = fuzzing_legacy.Channel(base)
    run.owed = 1  # the channel's initialize
    try:
        strategy = fuzzing_legacy.legacy_probes(run.port, session, run.channel.path)
        _drive(strategy, count, seed_value, run.one_legacy)
        if not run.died:
            run.settle()
    finally:
        run.channel.close()
        run.channel = None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000, help="2026-07-28 probes")
    parser.add_argument(
        "--legacy-messages",
        type=int,
        default=10_000,
        help="legacy probes (messages and batches), shared between POST /mcp of a "
        "2025-03-26 session and POST /messages of a 2024-11-05 channel",
    )
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (same seed, same run)")
    parser.add_argument(
        "--avoid",
        default="",
        help="comma-separated known defects to steer clear of (2026-07-28 probes), or "
        "'known' for all of " + ", ".join(fuzzing.KNOWN_DEFECTS),
    )
    parser.add_argument("--out", type=Path, default=None, help="where to write the summary")
    parser.add_argument("--canary-every", type=int, default=100)
    parser.add_argument(
        "--rss-growth-mib",
        type=int,
        default=fuzzing.RSS_GROWTH_MIB,
        help="largest RSS growth allowed after the warm-up",
    )
    args = parser.parse_args()
    # SIGTERM ends the run like Ctrl-C: the peer processes are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    avoid = fuzzing.parse_avoid(args.avoid)
    out = args.out or Path(tempfile.mkdtemp(prefix="mcp-shim-fuzz-"))
    out.mkdir(parents=True, exist_ok=True)

    legacy_port, gateway_port = procs.free_port(), procs.free_port()
    started = time.monotonic()
    seconds: dict[str, float] = {}
    with (
        procs.legacy_server(legacy_port, log_path=out / "legacy.log") as legacy_url,
        procs.gateway_process(
            legacy_url, gateway_port, env=fuzzing.GATEWAY_ENV, log_path=out / "gateway.log"
        ) as (_base, proc),
    ):
        run = Run(gateway_port, proc.pid, out, args.canary_every)
        rss_start = fuzzing.rss_kib(proc.pid)
        print(
            f"fuzzing the gateway (pid {proc.pid}) with {args.messages} 2026-07-28 and "
            f"{args.legacy_messages} legacy messages; out: {out}",
            flush=True,
        )
        _drive(fuzzing.probes(gateway_port, avoid), args.messages, args.seed, run.one)
        seconds["modern"] = time.monotonic() - started
        if not run.died:
            _legacy_part(run, args.legacy_messages, args.seed)
        seconds["legacy"] = time.monotonic() - started - seconds["modern"]
        if not run.died:
            run.canary()
        rss_end = fuzzing.rss_kib(proc.pid) if not run.died else 0
    warm = run.rss[1][1] if len(run.rss) > 1 else rss_start
    peak = max([kib for _, kib in run.rss] + [rss_start, rss_end])
    rss_failure = (rss_end - warm) > args.rss_growth_mib * 1024
    failures = sum(sum(t.causes.values()) for t in run.targets.values())
    summary = {
        "command": " ".join(sys.argv),
        "seed": args.seed,
        "avoid": sorted(avoid),
        "messages_sent": run.sent,
        "seconds": round(time.monotonic() - started, 1),
        "seconds_per_part": {k: round(v, 1) for k, v in seconds.items()},
        "failures": failures,
        "targets": {name: tally.summary() for name, tally in run.targets.items()},
        "canaries": run.canaries,
        "canary_failures": run.canary_failures,
        "gateway_died": run.died,
        "workers": len(run.workers),
        "rss_kib": {"start": rss_start, "after_warmup": warm, "peak_sampled": peak, "end": rss_end},
        "rss_samples": run.rss,
        "rss_growth_failure": rss_failure,
    }
    (out / "fuzz-summary.json").write_text(json.dumps(summary, indent=2))
    _print(summary)
    failed = bool(failures) or run.died or rss_failure or bool(run.canary_failures)
    print(f"\n{'FAILED' if failed else 'OK'}: summary in {out / 'fuzz-summary.json'}")
    return 1 if failed else 0


def _print(summary: dict[str, Any]) -> None:
    print(f"\nmessages sent: {summary['messages_sent']} in {summary['seconds']} s")
    for name, tally in summary["targets"].items():
        print(f"\n== {name}: {TARGETS[name]}")
        print(f"messages: {tally['messages_sent']}, slowest answer {tally['slowest_answer_s']} s")
        for key in ("per_status", "per_answer", "per_method", "per_mutation"):
            print(f"{key.replace('_', ' ')}:")
            for what, count in tally[key].items():
                print(f"  {count:>7}  {what}")
        _print_failures(tally)
    rss = summary["rss_kib"]
    print(
        f"\nRSS: start {rss['start'] // 1024} MiB, after warm-up {rss['after_warmup'] // 1024} "
        f"MiB, peak sampled {rss['peak_sampled'] // 1024} MiB, end {rss['end'] // 1024} MiB"
    )
    print(f"canaries: {summary['canaries']}, failed: {len(summary['canary_failures'])}")
    for line in summary["canary_failures"][:5]:
        print(f"  {line}")
    print(f"gateway (or one of its {summary['workers']} workers) died: {summary['gateway_died']}")
    print("failures per target:")
    for name, tally in summary["targets"].items():
        print(f"  {tally['failures']:>7}  {name} (of {tally['messages_sent']})")


def _print_failures(tally: dict[str, Any]) -> None:
    print("failures by cause:" if tally["failures_by_cause"] else "failures: none")
    for cause, count in tally["failures_by_cause"].items():
        entry = tally["reproducers"][cause]
        print(f"  {count:>7}  {cause}")
        print(f"           e.g. {entry['failures'][0][:200]}")
        if "probe" in entry:
            print(f"           mutations: {entry['probe']['mutations']}")
            print(f"           answer: {entry['status']} {entry['answer_body'][:160]!r}")


if __name__ == "__main__":
    sys.exit(main())
