"""The client's event-stream parser and its stream/polling decisions."""

from __future__ import annotations

import httpx

from aigc_hub.client import Event, NotFound, Unauthorized
from aigc_hub.client import _events as ev


def parse(text: str) -> list[ev.StreamItem]:
    parser = ev.Parser()
    return [item for line in text.split("\n") if (item := parser.feed(line)) is not None]


def test_events_comments_and_unknown_frames() -> None:
    note = '{"tenant_id":"t","subject_type":"task","subject_id":"s1","kind":"progress",'
    note += '"progress":0.5,"occurred_at_ms":1,"extra":"kept"}'
    text = (
        ": ready\nretry: 2000\n\n"
        f"event: notification\ndata: {note}\nid: f-1\n\n"
        ": heartbeat\n\n"
        'event: reset\nid: f-4\ndata: {"reason":"outside_window","detail":"re-read"}\n\n'
        "event: something-new\ndata: {}\n\n"
        "data: not json\n\n"
    )
    items = parse(text)
    assert items[0] == ev.READY and items[2] == ev.HEARTBEAT
    first = items[1]
    assert isinstance(first, Event) and first.kind == "notification" and first.id == "f-1"
    assert first.notification is not None and first.notification.progress == 0.5
    assert first.notification.model_extra == {"extra": "kept"}
    assert items[3] == Event("reset", "f-4", reason="outside_window")
    assert len(items) == 4  # unknown event types and bad data are skipped


def test_multi_line_data_joins_with_newlines() -> None:
    items = parse('event: reset\ndata: {"reason":\ndata: "slow_subscriber"}\n\n')
    assert items == [Event("reset", None, reason="slow_subscriber")]


def test_request_shape() -> None:
    assert ev.request_params("s1", 5) == {"subject_id": ["s1"], "max_seconds": 5}
    assert ev.request_params(["a", "b"], None) == {"subject_id": ["a", "b"]}
    assert ev.request_params(None, 10**9)["max_seconds"] == ev.MAX_SECONDS
    assert ev.request_headers("f-3")["Last-Event-ID"] == "f-3"
    assert "Last-Event-ID" not in ev.request_headers(None)


def test_which_failures_fall_back_to_polling() -> None:
    assert ev.stream_unavailable(httpx.ConnectError("refused"))
    assert ev.stream_unavailable(NotFound(404))
    assert not ev.stream_unavailable(Unauthorized(401))  # a bad key is not fixed by polling
    assert not ev.stream_unavailable(ValueError("bug"))
