"""Playback records (seed 000 §9.2.4) → one Arrow table, the columnar batch the analytics
store inserts.

A record's value is the seed's envelope as compact JSON, ``{"event_id", "timestamp",
"source", "payload": {avcc_code, platform_node, user_hash, event_type, duration_sec,
revenue_cny}}``, published by gateway-svc after it validated the payload. At 100,000 events/s
the work per record must stay tiny, so the decoder parses with orjson, checks each field's
JSON type with ``type(x) is ...`` and appends to plain column lists; no pydantic per record
(``PlaybackPayload`` is the gateway's check, ~30× slower). Range checks and the exact
conversion of revenue to cents run once per column, vectorized (numpy, pyarrow.compute).

A record that does not decode, lacks a field or has a field of the wrong type or range is
*rejected* with a :class:`Rejection` reason; the caller counts and dead-letters it. Pure: no
I/O, safe to run in a worker thread.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import orjson
import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type information
import pyarrow.compute as pc  # type: ignore[import-untyped]  # likewise

from aigc_hub.messaging.base import Record

#: The columns of ``playback_events`` in table order, with their Arrow types.
SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("avcc_code", pa.string(), nullable=False),
        pa.field("platform_node", pa.string(), nullable=False),
        pa.field("user_hash", pa.string(), nullable=False),
        pa.field("event_type", pa.string(), nullable=False),
        pa.field("duration_sec", pa.uint32(), nullable=False),
        pa.field("revenue_cny", pa.decimal128(9, 2), nullable=False),
        pa.field("source_partition", pa.uint16(), nullable=False),
        pa.field("source_offset", pa.uint64(), nullable=False),
    ]
)
COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)
EVENT_TYPES = frozenset({"play", "complete", "purchase"})
#: The largest revenue one event may carry (``PlaybackPayload.revenue_cny``'s bound), in fen.
MAX_REVENUE_FEN = 100_000_000
#: The largest duration (``PlaybackPayload.duration_sec``'s bound: a week).
MAX_DURATION_S = 7 * 86_400
_EVENT_TYPE_NAMES = tuple(EVENT_TYPES)  # a tuple: ``in`` on it never hashes the value
_CENT = pa.scalar(Decimal("0.01"), pa.decimal128(3, 2))
_FIELDS = ("avcc_code", "platform_node", "user_hash", "event_type", "duration_sec", "revenue_cny")


class Rejection(enum.StrEnum):
    """Why a record is not stored; the value is the metric label and the dead letter's class."""

    UNDECODABLE = "undecodable"
    MISSING_FIELD = "missing_field"
    BAD_FIELD = "bad_field"


@dataclass(frozen=True)
class Rejected:
    """A record left out of the table, with its reason and the field or error at fault."""

    record: Record
    reason: Rejection
    detail: str


@dataclass(frozen=True)
class DecodedBatch:
    """What a batch of records became: the rows to store, the records rejected, and per
    partition the span of offsets it covered, rejected records included so that they are not
    seen again."""

    table: pa.Table
    rejected: list[Rejected] = field(default_factory=list)
    #: partition → (first offset, next offset to read) of the records not skipped.
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Records of the batch below the stored offsets, skipped as already stored.
    skipped: int = 0

    @property
    def reached(self) -> dict[int, int]:
        """Per partition, the next offset to read once this batch is stored."""
        return {p: end for p, (_first, end) in self.spans.items()}

    @property
    def positions(self) -> str:
        """The offset ranges covered, ``p:first-last`` joined by ``,`` in partition order:
        the same text for the same records whatever their order (a batch's identity)."""
        return ",".join(f"{p}:{first}-{end - 1}" for p, (first, end) in sorted(self.spans.items()))


def decode(records: Sequence[Record], stored: Mapping[int, int] | None = None) -> DecodedBatch:
    """The rows of ``records`` not below ``stored`` (partition → next offset to store), as an
    Arrow table of :data:`SCHEMA`, and the records rejected with their reasons."""
    stored = stored or {}
    event_ids: list[str] = []
    stamps: list[int] = []
    codes: list[str] = []
    nodes: list[str] = []
    users: list[str] = []
    kinds: list[str] = []
    durations: list[int] = []
    revenues: list[float] = []
    partitions: list[int] = []
    offsets: list[int] = []
    kept: list[Record] = []
    rejected: list[Rejected] = []
    spans: dict[int, tuple[int, int]] = {}
    skipped = 0
    for record in records:
        partition, offset = record.partition, record.offset
        if offset < stored.get(partition, 0):
            skipped += 1
            continue
        # Records of a partition come in offset order: the first seen opens its span, the
        # last seen ends it.
        spans[partition] = (spans.get(partition, (offset, 0))[0], offset + 1)
        try:
            envelope = orjson.loads(record.value)
            payload = envelope["payload"]
            event_id = envelope["event_id"]
            ts = envelope["timestamp"]
            code = payload["avcc_code"]
            node = payload["platform_node"]
            user = payload["user_hash"]
            kind = payload["event_type"]
            duration = payload["duration_sec"]
            revenue = payload["revenue_cny"]
        except orjson.JSONDecodeError as exc:
            rejected.append(Rejected(record, Rejection.UNDECODABLE, str(exc)))
            continue
        except (KeyError, TypeError):
            rejected.append(_missing(record))
            continue
        # ``type(x) is int`` and not isinstance: JSON ``true`` decodes to a bool, an int.
        if not (
            type(event_id) is str
            and type(ts) is int
            and type(code) is str
            and type(node) is str
            and type(user) is str
            and type(kind) is str
            and kind in EVENT_TYPES
            and type(duration) is int
            and 0 <= duration <= MAX_DURATION_S
            and (type(revenue) is float or type(revenue) is int)
        ):
            rejected.append(Rejected(record, Rejection.BAD_FIELD, _bad_field(envelope)))
            continue
        event_ids.append(event_id)
        stamps.append(ts)
        codes.append(code)
        nodes.append(node)
        users.append(user)
        kinds.append(kind)
        durations.append(duration)
        revenues.append(revenue)
        partitions.append(partition)
        offsets.append(offset)
        kept.append(record)

    revenue, bad = _revenue(revenues)
    columns = [event_ids, stamps, codes, nodes, users, kinds, durations]
    arrays = [pa.array(values, type=f.type) for values, f in zip(columns, SCHEMA, strict=False)]
    arrays += [revenue, pa.array(partitions, pa.uint16()), pa.array(offsets, pa.uint64())]
    table = pa.Table.from_arrays(arrays, schema=SCHEMA)
    if bad.any():
        table = table.filter(pa.array(~bad))
        for i in np.flatnonzero(bad).tolist():
            rejected.append(Rejected(kept[i], Rejection.BAD_FIELD, f"revenue_cny={revenues[i]!r}"))
    return DecodedBatch(table, rejected, spans, skipped)


def _revenue(revenues: list[float]) -> tuple[pa.Array, np.ndarray]:
    """The exact revenue column (CNY, 2 decimals) and a mask of the amounts that are not a
    non-negative whole number of cents within range (their rows must be dropped)."""
    yuan = np.asarray(revenues, dtype=np.float64)
    # Whole cents, exactly: a JSON ``12.5`` is the double nearest 12.5, so ×100 then rounding
    # gives 1250; a value off a whole cent by more than float noise has a third decimal.
    fen = np.rint(yuan * 100)
    bad = (np.abs(yuan * 100 - fen) > 1e-6) | (fen < 0) | (fen > MAX_REVENUE_FEN)
    fen[bad] = 0  # dropped rows; zeroed so the checked cast below cannot overflow on them
    cents = pa.array(fen.astype(np.int64)).cast(pa.decimal128(19, 0))
    return pc.multiply(cents, _CENT).cast(pa.decimal128(9, 2)), bad


def _missing(record: Record) -> Rejected:
    """The rejection of a decoded value without one of the fields (or not an object)."""
    try:
        envelope = orjson.loads(record.value)
    except orjson.JSONDecodeError as exc:  # pragma: no cover - decoded once already
        return Rejected(record, Rejection.UNDECODABLE, str(exc))
    if not isinstance(envelope, dict):
        return Rejected(record, Rejection.UNDECODABLE, "not a JSON object")
    payload = envelope.get("payload")
    if payload is None:
        return Rejected(record, Rejection.MISSING_FIELD, "payload")
    if not isinstance(payload, dict):
        return Rejected(record, Rejection.BAD_FIELD, "payload is not an object")
    for name in ("event_id", "timestamp"):
        if name not in envelope:
            return Rejected(record, Rejection.MISSING_FIELD, name)
    missing = [name for name in _FIELDS if name not in payload]
    return Rejected(record, Rejection.MISSING_FIELD, ",".join(missing))


def _bad_field(envelope: dict[str, object]) -> str:
    """The first field of a decoded envelope whose JSON type or range is wrong (slow path)."""
    payload = envelope["payload"]
    assert isinstance(payload, dict)
    checks: list[tuple[str, object, bool]] = [
        ("event_id", envelope["event_id"], type(envelope["event_id"]) is str),
        ("timestamp", envelope["timestamp"], type(envelope["timestamp"]) is int),
        *((name, payload[name], type(payload[name]) is str) for name in _FIELDS[:3]),
        ("event_type", payload["event_type"], payload["event_type"] in _EVENT_TYPE_NAMES),
        ("duration_sec", payload["duration_sec"], _is_duration(payload["duration_sec"])),
        ("revenue_cny", payload["revenue_cny"], type(payload["revenue_cny"]) in (int, float)),
    ]
    return next((f"{name}={value!r}"[:200] for name, value, ok in checks if not ok), "")


def _is_duration(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_DURATION_S
