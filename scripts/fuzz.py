"""The long fuzz run: hostile messages at a real gateway in front of the real legacy fixture.

    .venv/bin/python scripts/fuzz.py --messages 10000 [--seed 7] [--avoid known] [--out DIR]

Starts the legacy fixture server (.peers/legacy) and the gateway as processes
on loopback, then sends the probes of tests/fuzzing.py (the generators and
checks the suite's bounded test uses), each on its own connection. Every
`--canary-every` messages a conforming `tools/call` must still succeed: other
callers are unaffected. Prints the counts (messages, per HTTP status, per
JSON-RPC error code, per mutation, failures grouped by cause with one
reproducer each, RSS at start and end) and writes them as JSON to
DIR/fuzz-summary.json with every failing probe in DIR/failures.jsonl. Exits 1
on any failure, if the gateway dies, or if its RSS grows past the bound.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from tests import fuzzing, procs  # noqa: E402


class Run:
    def __init__(self, port: int, pid: int, out: Path, canary_every: int) -> None:
        self.port = port
        self.pid = pid
        self.out = out
        self.canary_every = canary_every
        self.sent = 0
        self.status: Counter[str] = Counter()
        self.codes: Counter[str] = Counter()
        self.mutations: Counter[str] = Counter()
        self.methods: Counter[str] = Counter()
        self.causes: Counter[str] = Counter()
        self.first: dict[str, dict[str, Any]] = {}
        self.canaries = 0
        self.canary_failures: list[str] = []
        self.rss: list[tuple[int, int]] = []
        self.died = False
        self.slowest = 0.0
        (out / "failures.jsonl").write_text("")

    def one(self, probe: fuzzing.Probe) -> None:
        if self.died:
            return
        answer = fuzzing.send(self.port, probe)
        self.sent += 1
        self.slowest = max(self.slowest, answer.seconds)
        self.status[str(answer.status) if answer.error is None else "no answer"] += 1
        self.methods[("notification " if probe.notification else "") + str(probe.method)[:40]] += 1
        for mutation in probe.mutations or ["none"]:
            self.mutations[
                " ".join(mutation.split()[:2])
                if mutation.startswith("header")
                else mutation.split()[0]
            ] += 1
        self.codes[_code(answer)] += 1
        failures = fuzzing.check(probe, answer)
        if failures:
            self.record(probe, answer, failures)
        if fuzzing.process_alive(self.pid) is False:
            self.died = True
            self.record(probe, answer, ["the gateway process died: " + self.last_words()])
            return
        if self.sent % 250 == 0:
            self.rss.append((self.sent, fuzzing.rss_kib(self.pid)))
        if self.sent % self.canary_every == 0:
            self.canary()
        if self.sent % 1000 == 0:
            print(
                f"  {self.sent} sent, {sum(self.causes.values())} failures, "
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
            if any(w in line for w in ("Shutting down", "Traceback", '"error"', "Killed"))
        ]
        return " | ".join(telling)[-600:] or "no clue in the last 40 log lines"

    def canary(self) -> None:
        self.canaries += 1
        problem = fuzzing.canary(self.port)
        if problem is not None:
            self.canary_failures.append(f"after {self.sent} messages: {problem}")

    def record(self, probe: fuzzing.Probe, answer: fuzzing.Answer, failures: list[str]) -> None:
        cause = fuzzing.failure_cause(probe, failures)
        self.causes[cause] += 1
        entry = {
            "failures": failures,
            "status": answer.status,
            "answer_error": answer.error,
            "answer_headers": answer.headers,
            "answer_body": answer.body[:600].decode("utf-8", "replace"),
            "probe": probe.reproducer(),
        }
        if cause not in self.first or len(probe.body) < self.first[cause]["probe"]["body_len"]:
            self.first[cause] = entry
        with (self.out / "failures.jsonl").open("a") as f:
            f.write(json.dumps(entry) + "\n")


def _code(answer: fuzzing.Answer) -> str:
    if answer.error is not None or not answer.body:
        return "-"
    try:
        messages = fuzzing.answer_messages(answer)
    except ValueError:
        return "not JSON-RPC"
    if not messages or not isinstance(messages[-1], dict):
        return "not JSON-RPC"
    final = messages[-1]
    if "error" in final and isinstance(final["error"], dict):
        return str(final["error"].get("code"))
    if "result" in final:
        kind = final["result"].get("resultType") if isinstance(final["result"], dict) else None
        return f"result ({kind})"
    if "method" in final:
        return f"notification {final['method']}"
    return "other"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (same seed, same run)")
    parser.add_argument(
        "--avoid",
        default="",
        help="comma-separated known defects to steer clear of, or 'known' for all of "
        + ", ".join(fuzzing.KNOWN_DEFECTS),
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
    with (
        procs.legacy_server(legacy_port, log_path=out / "legacy.log") as legacy_url,
        procs.gateway_process(
            legacy_url, gateway_port, env=fuzzing.GATEWAY_ENV, log_path=out / "gateway.log"
        ) as (_base, proc),
    ):
        run = Run(gateway_port, proc.pid, out, args.canary_every)
        rss_start = fuzzing.rss_kib(proc.pid)

        @seed(args.seed)
        @settings(
            max_examples=args.messages,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(fuzzing.probes(gateway_port, avoid))
        def drive(probe: fuzzing.Probe) -> None:
            run.one(probe)

        print(f"fuzzing the gateway (pid {proc.pid}) with {args.messages} messages; out: {out}")
        drive()
        run.canary()
        rss_end = fuzzing.rss_kib(proc.pid) if not run.died else 0
    seconds = time.monotonic() - started
    warm = run.rss[1][1] if len(run.rss) > 1 else rss_start
    peak = max([kib for _, kib in run.rss] + [rss_start, rss_end])
    rss_failure = (rss_end - warm) > args.rss_growth_mib * 1024
    summary = {
        "command": " ".join(sys.argv),
        "seed": args.seed,
        "avoid": sorted(avoid),
        "messages_sent": run.sent,
        "seconds": round(seconds, 1),
        "slowest_answer_s": round(run.slowest, 2),
        "per_status": dict(run.status.most_common()),
        "per_error_code": dict(run.codes.most_common()),
        "per_method": dict(run.methods.most_common()),
        "per_mutation": dict(run.mutations.most_common()),
        "canaries": run.canaries,
        "canary_failures": run.canary_failures,
        "gateway_died": run.died,
        "rss_kib": {"start": rss_start, "after_warmup": warm, "peak_sampled": peak, "end": rss_end},
        "rss_samples": run.rss,
        "rss_growth_failure": rss_failure,
        "failures_by_cause": dict(run.causes.most_common()),
        "reproducers": run.first,
    }
    (out / "fuzz-summary.json").write_text(json.dumps(summary, indent=2))
    _print(summary)
    failed = bool(run.causes) or run.died or rss_failure or bool(run.canary_failures)
    print(f"\n{'FAILED' if failed else 'OK'}: summary in {out / 'fuzz-summary.json'}")
    return 1 if failed else 0


def _print(summary: dict[str, Any]) -> None:
    print(f"\nmessages sent: {summary['messages_sent']} in {summary['seconds']} s")
    for key in ("per_status", "per_error_code", "per_method", "per_mutation"):
        print(f"{key.replace('_', ' ')}:")
        for name, count in summary[key].items():
            print(f"  {count:>7}  {name}")
    rss = summary["rss_kib"]
    print(
        f"RSS: start {rss['start'] // 1024} MiB, after warm-up {rss['after_warmup'] // 1024} MiB, "
        f"peak sampled {rss['peak_sampled'] // 1024} MiB, end {rss['end'] // 1024} MiB"
    )
    print(f"canaries: {summary['canaries']}, failed: {len(summary['canary_failures'])}")
    for line in summary["canary_failures"][:5]:
        print(f"  {line}")
    print(f"gateway died: {summary['gateway_died']}")
    print("failures by cause:" if summary["failures_by_cause"] else "failures: none")
    for cause, count in summary["failures_by_cause"].items():
        entry = summary["reproducers"][cause]
        print(f"  {count:>7}  {cause}")
        print(f"           e.g. {entry['failures'][0][:200]}")
        print(f"           mutations: {entry['probe']['mutations']}")
        print(f"           answer: {entry['status']} {entry['answer_body'][:160]!r}")


if __name__ == "__main__":
    sys.exit(main())
