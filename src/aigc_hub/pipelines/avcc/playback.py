"""gateway-svc: a platform node's batch of playback events (seed 000 §9.2.4), checked and
turned into records for ``topic.playback.event`` and purchases for settlement.

The batch is ``{"events": [{"event_id", "timestamp", "payload": {six §9.2.4 fields}}]}``:
the seed's envelope, whose ``source`` the gateway sets (``gateway-svc``). A batch is taken
whole or refused whole (422, each bad event named by its index), so a node never has to
guess which of its events were kept.

The checks are written out here rather than left to a pydantic model: the gateway is the
hot path of the telemetry road (100,000 events/s is the aim) and a model validation of the
batch costs several times the JSON parse (measured: ~14 µs an event against ~2 µs for
``orjson.loads``, see docs/benchmarks.md). :class:`~.events.PlaybackPayload` stays the
documented schema of the payload, and the tests hold the two to the same answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from aigc_hub.core.errors import PermanentError
from aigc_hub.messaging.base import OutgoingMessage

from . import events
from .codes import InvalidCode, parse_code

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_CODE = re.compile(events.CODE_PATTERN)
_ENVELOPE_KEYS = frozenset({"event_id", "timestamp", "payload"})
_PAYLOAD_KEYS = frozenset(
    {"avcc_code", "platform_node", "user_hash", "event_type", "duration_sec", "revenue_cny"}
)
_EVENT_TYPES = frozenset({"play", "complete", "purchase"})
_MAX_DURATION_S = 7 * 86_400
_MAX_REVENUE_CNY = 1_000_000
#: Errors listed in one refusal; the rest are counted.
MAX_ERRORS = 20


class BatchRefused(PermanentError, ValueError):
    """The batch is refused whole; ``errors`` name the bad events (at most :data:`MAX_ERRORS`)."""

    def __init__(self, detail: str, errors: list[dict[str, str]], total: int = 0) -> None:
        super().__init__(detail)
        self.errors = errors
        self.total = total or len(errors)


@dataclass(frozen=True)
class Limits:
    """What the gateway accepts: batch size and the timestamps' window around now."""

    max_events: int
    oldest_ms: int
    newest_ms: int


@dataclass
class Batch:
    """An accepted batch: one record per event, and the purchases among them (with their
    index in the batch)."""

    records: list[OutgoingMessage] = field(default_factory=list)
    purchases: list[tuple[int, events.PurchaseRecorded]] = field(default_factory=list)


@dataclass
class _Errors:
    found: list[dict[str, str]] = field(default_factory=list)
    total: int = 0

    def add(self, index: int, name: str, message: str) -> None:
        self.total += 1
        if len(self.found) < MAX_ERRORS:
            where = f"body.events[{index}]" + (f".{name}" if name else "")
            self.found.append({"field": where, "message": message})


def parse_batch(
    body: bytes, node: str, limits: Limits, code_is_valid: Callable[[str], bool]
) -> Batch:
    """The batch ``node`` sent, checked whole; raises :class:`BatchRefused`.

    ``code_is_valid`` judges a code's check character (the caller caches its answers).
    """
    items = _events_of(body, limits)
    errors = _Errors()
    batch = Batch()
    for index, item in enumerate(items):
        found = _check(item, node, limits, code_is_valid)
        if found:
            for name, message in found:
                errors.add(index, name, message)
            continue
        if errors.total:
            continue  # the batch is refused: no need to build what will not be sent
        payload = item["payload"]
        value = orjson.dumps(
            {
                "event_id": item["event_id"],
                "timestamp": item["timestamp"],
                "source": events.GATEWAY_SVC,
                "payload": payload,
            }
        )
        code = payload["avcc_code"]
        batch.records.append(OutgoingMessage(events.PLAYBACK_TOPIC, code, value))
        if payload["event_type"] == "purchase":
            batch.purchases.append(
                (
                    index,
                    events.PurchaseRecorded(
                        purchase_id=item["event_id"].lower(),
                        avcc_code=code,
                        platform_node=payload["platform_node"],
                        user_hash=payload["user_hash"],
                        revenue_fen=round(payload["revenue_cny"] * 100),
                        occurred_at=item["timestamp"],
                    ),
                )
            )
    if errors.total:
        raise BatchRefused(
            f"{errors.total} invalid event(s): the batch was not taken, fix them and resend it",
            errors.found,
            errors.total,
        )
    return batch


def _events_of(body: bytes, limits: Limits) -> list[Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BatchRefused(
            "the body is not JSON", [{"field": "body", "message": str(exc)}]
        ) from None
    if not isinstance(doc, dict) or set(doc) != {"events"} or not isinstance(doc["events"], list):
        raise BatchRefused(
            "the body must be an object with one field, events: a list",
            [{"field": "body", "message": 'expected {"events": [...]}'}],
        )
    items: list[Any] = doc["events"]
    if not 1 <= len(items) <= limits.max_events:
        raise BatchRefused(
            f"a batch holds 1 to {limits.max_events} events, not {len(items)}",
            [{"field": "body.events", "message": f"1 to {limits.max_events} events"}],
        )
    return items


def _check(
    item: Any, node: str, limits: Limits, code_is_valid: Callable[[str], bool]
) -> list[tuple[str, str]]:
    """What is wrong with one event, as (field, message) pairs; [] when it is good."""
    if _is_good(item, node, limits, code_is_valid):
        return []
    return _explain(item, node, limits, code_is_valid)


def _is_good(item: Any, node: str, limits: Limits, code_is_valid: Callable[[str], bool]) -> bool:
    """True exactly when :func:`_explain` finds nothing: the common case, judged in one
    expression (no generator, no list) since it runs for every event."""
    if type(item) is not dict or item.keys() != _ENVELOPE_KEYS:
        return False
    p, ts, event_id = item["payload"], item["timestamp"], item["event_id"]
    if type(p) is not dict or p.keys() != _PAYLOAD_KEYS:
        return False
    code, user, kind = p["avcc_code"], p["user_hash"], p["event_type"]
    duration, revenue = p["duration_sec"], p["revenue_cny"]
    return (
        type(event_id) is str
        and _UUID.fullmatch(event_id) is not None
        and type(ts) is int
        and limits.oldest_ms <= ts <= limits.newest_ms
        and p["platform_node"] == node
        and type(user) is str
        and 1 <= len(user) <= 100
        and type(duration) is int
        and 0 <= duration <= _MAX_DURATION_S
        and type(code) is str
        and code_is_valid(code)  # a code it accepts also matches events.CODE_PATTERN
        and type(revenue) in (int, float)
        and (
            (kind in ("play", "complete") and revenue == 0)
            or (
                kind == "purchase"
                and 0 < revenue <= _MAX_REVENUE_CNY
                and abs(revenue * 100 - round(revenue * 100)) <= 1e-6
            )
        )
    )


def _explain(
    item: Any, node: str, limits: Limits, code_is_valid: Callable[[str], bool]
) -> list[tuple[str, str]]:
    """Every fault of one event, as (field, message) pairs."""
    if type(item) is not dict or item.keys() != _ENVELOPE_KEYS:
        return [("", "an event is an object with event_id, timestamp and payload")]
    wrong = list(_envelope_errors(item, limits))
    payload = item["payload"]
    if type(payload) is not dict or payload.keys() != _PAYLOAD_KEYS:
        return [*wrong, ("payload", "the payload has exactly " + ", ".join(sorted(_PAYLOAD_KEYS)))]
    wrong += [(f"payload.{name}", message) for name, message in _payload_errors(payload, node)]
    code = payload["avcc_code"]
    if not wrong and not code_is_valid(code):
        wrong.append(("payload.avcc_code", "not an AVCC code: its check character is wrong"))
    return wrong


def _envelope_errors(item: Mapping[str, Any], limits: Limits) -> Iterator[tuple[str, str]]:
    event_id, ts = item["event_id"], item["timestamp"]
    if type(event_id) is not str or not _UUID.fullmatch(event_id):
        yield "event_id", "a UUID, e.g. 0190a0b4-1c2d-7e3f-8a9b-0c1d2e3f4a5b"
    if type(ts) is not int:
        yield "timestamp", "epoch milliseconds, an integer"
    elif not limits.oldest_ms <= ts <= limits.newest_ms:
        yield "timestamp", "outside the accepted window (3 days back, a few minutes ahead)"


def _payload_errors(p: Mapping[str, Any], node: str) -> Iterator[tuple[str, str]]:
    code, reporter, user = p["avcc_code"], p["platform_node"], p["user_hash"]
    kind, duration, revenue = p["event_type"], p["duration_sec"], p["revenue_cny"]
    if type(code) is not str or not _CODE.fullmatch(code):
        yield "avcc_code", "an AVCC code, e.g. MA.156.10005.8361/0000002QJ"
    if reporter != node:
        yield "platform_node", f"this key reports for node {node} only"
    if type(user) is not str or not 1 <= len(user) <= 100:
        yield "user_hash", "a string of 1 to 100 characters"
    if kind not in _EVENT_TYPES:
        yield "event_type", "play, complete or purchase"
    if type(duration) is not int or not 0 <= duration <= _MAX_DURATION_S:
        yield "duration_sec", f"an integer from 0 to {_MAX_DURATION_S}"
    if type(revenue) not in (int, float) or not 0 <= revenue <= _MAX_REVENUE_CNY:
        yield "revenue_cny", f"a number from 0 to {_MAX_REVENUE_CNY}"
    elif abs(revenue * 100 - round(revenue * 100)) > 1e-6:
        yield "revenue_cny", "at most two decimals (CNY)"
    elif kind == "purchase" and revenue <= 0:
        yield "revenue_cny", "a purchase carries its revenue"
    elif kind in ("play", "complete") and revenue != 0:
        yield "revenue_cny", "only a purchase carries revenue"


class CodeChecks:
    """Remembers which codes have a good check character (a node reports the same codes
    over and over; computing ISO 7064 each time would cost more than the rest of the checks)."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._known: dict[str, bool] = {}

    def __call__(self, code: str) -> bool:
        known = self._known.get(code)
        if known is None:
            try:
                parse_code(code)
                known = True
            except InvalidCode:
                known = False
            if len(self._known) >= self.capacity:
                self._known.clear()  # rare; a fresh start beats an LRU's cost per call
            self._known[code] = known
        return known
