"""W3C Trace Context validation (app/tracing/): what is forwarded upstream
and what is dropped. Cases from https://www.w3.org/TR/trace-context/ section 3."""

from __future__ import annotations

import pytest

from app import tracing

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    "value",
    [
        VALID,
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        # 3.2.4: a later version may append fields after a dash.
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09",
    ],
)
def test_valid_traceparent_is_kept(value: str) -> None:
    assert tracing.parse_traceparent(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        # 3.2.2.1: version ff is forbidden.
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        # 3.2.2.3 / 3.2.2.4: all-zero trace id or parent id is invalid.
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        # Uppercase hex is not the format.
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        # Version 00 has exactly four fields.
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        # Short fields.
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nx-evil: 1",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + "a" * 600,
    ],
)
def test_invalid_traceparent_is_dropped(value: str) -> None:
    assert tracing.parse_traceparent(value) is None


def test_context_from_headers() -> None:
    context = tracing.from_headers([VALID], ["rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE"])
    assert context is not None
    assert context.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert context.headers() == {
        "traceparent": VALID,
        "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    }


def test_more_than_one_traceparent_is_invalid() -> None:
    assert tracing.from_headers([VALID, VALID], []) is None
    assert tracing.from_headers([], ["rojo=1"]) is None


@pytest.mark.parametrize(
    "tracestate",
    [
        "no-equals",
        "UPPER=1",
        "rojo=1,rojo=2",  # 3.3.1.1: a key at most once
        "rojo=a,b",
        ",".join(f"k{i}=v" for i in range(33)),  # at most 32 members
        "rojo=va=lue",
    ],
)
def test_invalid_tracestate_is_dropped_alone(tracestate: str) -> None:
    context = tracing.from_headers([VALID], [tracestate])
    assert context is not None and context.tracestate is None
    assert context.headers() == {"traceparent": VALID}


def test_tenant_keys_and_empty_members() -> None:
    context = tracing.from_headers([VALID], ["fw529a3039@dt=FzVv, ,rojo=00f067aa0ba902b7"])
    assert context is not None
    assert context.tracestate == "fw529a3039@dt=FzVv,rojo=00f067aa0ba902b7"


def test_outgoing_headers_follow_the_bound_context() -> None:
    tracing.bind(tracing.from_headers([VALID], []))
    assert tracing.outgoing_headers() == {"traceparent": VALID}
    tracing.bind(None)
    assert tracing.outgoing_headers() == {}
