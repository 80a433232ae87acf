"""JSON log lines carry the bound event's ids; trace context survives the broker's headers."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.logs import captured_logs

from aigc_hub.core.envelope import Envelope
from aigc_hub.messaging import headers as hub_headers
from aigc_hub.observability import logging as hub_logging
from aigc_hub.observability import tracing

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    with captured_logs() as out:
        yield out


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


def _envelope(trace_id: str | None = TRACE) -> Envelope:
    return Envelope.new("test.thing.happened", {}, key="k1", source="tests", trace_id=trace_id)


def test_json_lines_carry_bound_ids_from_structlog_and_stdlib(stream: io.StringIO) -> None:
    env = _envelope()
    log = hub_logging.get_logger("aigc_hub.test")
    std = logging.getLogger("aigc_hub.test.std")
    log.info("before")
    with hub_logging.bind_event(env, consumer="effects-writer"):
        log.info("handled", n=3)
        std.warning("from stdlib %s", "too")
    log.info("after")
    before, handled, stdlib_line, after = _lines(stream)
    for line in (handled, stdlib_line):
        assert line["event_id"] == env.event_id
        assert line["trace_id"] == TRACE
        assert line["consumer"] == "effects-writer"
        assert line["event_type"] == "test.thing.happened"
        assert "ts" in line and "level" in line
    assert handled["event"] == "handled" and handled["n"] == 3 and handled["level"] == "info"
    assert stdlib_line["event"] == "from stdlib too" and stdlib_line["level"] == "warning"
    assert stdlib_line["logger"] == "aigc_hub.test.std"
    for line in (before, after):
        assert "event_id" not in line and "consumer" not in line


def test_unset_ids_are_left_out_and_bindings_nest(stream: io.StringIO) -> None:
    outer, inner = _envelope(trace_id=None), _envelope()
    log = hub_logging.get_logger()
    with hub_logging.bind_event(outer):
        with hub_logging.bind_event(inner, consumer="g"):
            log.info("inner")
        log.info("outer")
    inner_line, outer_line = _lines(stream)
    assert inner_line["event_id"] == inner.event_id and inner_line["consumer"] == "g"
    assert outer_line["event_id"] == outer.event_id
    assert "trace_id" not in outer_line and "consumer" not in outer_line


async def test_concurrent_tasks_log_their_own_event(stream: io.StringIO) -> None:
    log = hub_logging.get_logger()
    envs = [_envelope() for _ in range(3)]
    gate = asyncio.Event()

    async def handle(env: Envelope) -> None:
        with hub_logging.bind_event(env, consumer="g"):
            await gate.wait()  # every task is inside its binding at once
            log.info("handled", key=env.event_id)

    tasks = [asyncio.create_task(handle(env)) for env in envs]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*tasks)
    lines = [line for line in _lines(stream) if line["event"] == "handled"]
    assert len(lines) == 3
    assert all(line["event_id"] == line["key"] for line in lines)


def test_exceptions_are_rendered_into_the_line(stream: io.StringIO) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("aigc_hub.test").exception("failed")
    (line,) = _lines(stream)
    assert line["level"] == "error" and "ValueError: boom" in line["exception"]


def test_console_format_and_level(stream: io.StringIO) -> None:
    out = io.StringIO()
    hub_logging.configure_logging("WARNING", json=False, stream=out)
    logging.getLogger("aigc_hub.test").info("hidden")
    logging.getLogger("aigc_hub.test").warning("shown")
    assert "shown" in out.getvalue() and "hidden" not in out.getvalue()
    assert stream.getvalue() == ""  # the second call replaced the first handler


def test_traceparent_round_trip() -> None:
    headers: dict[str, str] = {}
    assert tracing.inject(headers, TRACE, SPAN) is headers
    assert headers == {"traceparent": f"00-{TRACE}-{SPAN}-01"}
    assert tracing.extract(headers) == (TRACE, SPAN)
    new = tracing.new_span_id()
    assert tracing.extract(tracing.inject({}, TRACE, new)) == (TRACE, new)


def test_envelope_headers_carry_the_envelope_trace() -> None:
    env = _envelope()
    headers = hub_headers.for_envelope(
        env.event_id, env.event_type, env.schema_version, env.trace_id, env.tenant_id
    )
    extracted = tracing.extract(headers)
    assert extracted is not None and extracted[0] == TRACE
    assert tracing.extract({"TraceParent": headers["traceparent"]}) == extracted


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        f"ff-{TRACE}-{SPAN}-01",
        f"00-{'0' * 32}-{SPAN}-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"00-{TRACE.upper()}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-01-extra",
        f"00-{TRACE[:-1]}-{SPAN}-01",
    ],
)
def test_invalid_traceparent_is_ignored(value: str) -> None:
    assert tracing.extract({"traceparent": value}) is None


def test_future_version_and_flags_parse() -> None:
    parent = tracing.parse(f"01-{TRACE}-{SPAN}-00-what-comes-next")
    assert parent == tracing.TraceParent(TRACE, SPAN, 0) and not parent.sampled
    assert tracing.extract({}) is None


def test_without_opentelemetry_the_helpers_do_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "otel_available", lambda: False)
    with tracing.consumer_span("consume", tracing.inject({}, TRACE, SPAN)) as span:
        assert span is None
        assert tracing.current_ids() is None


def test_consumer_span_continues_the_producer_trace() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    headers = tracing.inject({}, TRACE, SPAN)
    with tracing.consumer_span(
        "test.effects process",
        headers,
        attributes={"messaging.consumer.group.name": "g"},
        tracer_provider=provider,
    ) as span:
        assert span is not None
        ids = tracing.current_ids()
    assert ids is not None and ids[0] == TRACE and ids[1] != SPAN
    (finished,) = exporter.get_finished_spans()
    assert finished.context is not None and finished.parent is not None
    assert f"{finished.context.trace_id:032x}" == TRACE
    assert f"{finished.parent.span_id:016x}" == SPAN and finished.parent.is_remote
    assert finished.kind is SpanKind.CONSUMER
    assert tracing.current_ids() is None  # the span ended with the block
    provider.shutdown()


def test_consumer_span_records_errors_and_starts_a_trace_without_headers() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with (
        pytest.raises(RuntimeError),
        tracing.consumer_span("process", {}, tracer_provider=provider),
    ):
        raise RuntimeError("handler failed")
    (finished,) = exporter.get_finished_spans()
    assert finished.parent is None
    assert finished.status.status_code is StatusCode.ERROR
    provider.shutdown()


def _sdk_provider() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_sdk_configured_believes_no_sdk_for_a_while_then_keeps_a_yes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace

    monkeypatch.setattr(tracing, "_sdk_seen", False)
    monkeypatch.setattr(tracing, "_no_sdk_at", None)
    monkeypatch.setattr(tracing, "NO_SDK_RECHECK_S", 3600.0)
    assert not tracing.sdk_configured()  # the test process sets no global provider
    provider, _ = _sdk_provider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    assert not tracing.sdk_configured()  # "no" is believed within the re-check time
    monkeypatch.setattr(tracing, "NO_SDK_RECHECK_S", 0.0)
    assert tracing.sdk_configured()
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    assert tracing.sdk_configured()  # a global provider cannot be unset: "yes" is kept
    provider.shutdown()


async def _traced_run(envelope: Envelope) -> tuple[list[Envelope], str | None]:
    from aigc_hub.core.clock import ManualClock
    from aigc_hub.messaging.base import Record
    from aigc_hub.runtime.context import HandlerContext
    from aigc_hub.runtime.middleware.tracing import Tracing

    headers = hub_headers.for_envelope(
        envelope.event_id, envelope.event_type, 1, envelope.trace_id, None
    )
    record = Record("test.things", 0, 7, envelope.key, envelope.to_bytes(), headers, 0)
    ctx = HandlerContext(
        consumer="g",
        pipeline="test",
        record=record,
        engine=None,  # type: ignore[arg-type]
        clock=ManualClock(),
    )
    seen_trace: str | None = None

    async def handler(env: Envelope, _ctx: HandlerContext) -> list[Envelope]:
        nonlocal seen_trace
        ids = tracing.current_ids()
        seen_trace = ids[0] if ids else None
        hub_logging.get_logger("test").info("handled")
        return [env]

    return await Tracing()(handler, envelope, ctx), seen_trace


@pytest.mark.parametrize("with_sdk", [False, True])
async def test_tracing_middleware_binds_the_event_and_spans_only_with_an_sdk(
    stream: io.StringIO, monkeypatch: pytest.MonkeyPatch, with_sdk: bool
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace

    provider, exporter = _sdk_provider()
    monkeypatch.setattr(tracing, "_sdk_seen", False)
    monkeypatch.setattr(tracing, "_no_sdk_at", None)
    if with_sdk:
        monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    env = _envelope()

    emitted, seen_trace = await _traced_run(env)

    assert emitted == [env]
    (line,) = [line for line in _lines(stream) if line["logger"] == "test"]
    assert line["event"] == "handled" and line["event_id"] == env.event_id
    assert line["trace_id"] == TRACE and line["consumer"] == "g"
    if with_sdk:
        (span,) = exporter.get_finished_spans()
        assert span.name == "test.things process" and seen_trace == TRACE
    else:
        assert exporter.get_finished_spans() == () and seen_trace is None
    hub_logging.get_logger("test").info("after")
    assert "event_id" not in _lines(stream)[-1]  # the binding ended with the run
    provider.shutdown()
