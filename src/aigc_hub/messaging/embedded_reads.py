"""How an embedded-log member reads: a fair share of ``max_records`` per owned partition,
fetched with one ``UNION ALL`` SELECT (one ranged term per partition), not a query per record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.messaging import embedded_schema as schema
from aigc_hub.messaging.base import Record
from aigc_hub.messaging.embedded_topics import TopicDirectory

#: Partitions read per SELECT (one UNION ALL term each), well under SQLite's compound limit.
TERMS_PER_SELECT = 100


async def read_owned(
    conn: AsyncConnection,
    group: str | None,
    positions: Mapping[int, int],
    max_records: int,
    shift: int,
) -> tuple[int, list[Any]]:
    """The group's generation (0 for no group, e.g. a tail), and rows ``(tp_id, offset, key,
    value, headers, timestamp_ms)`` from each owned partition's position.

    Partitions come in turn (starting at ``shift``), each one's rows in offset order. One
    statement reads the generation with the partitions' ends, and a second one the records
    only when some are there: an idle fetch costs one statement.
    """
    generation = 0
    available: dict[int, int] = {}
    for tp, end in await conn.execute(_ENDS, {"grp": group, "tp_ids": list(positions)}):
        if tp == _GENERATION_ROW:
            generation = end
        elif end > positions[tp]:
            available[tp] = end - positions[tp]
    quotas = list(fair_quotas(available, max_records, shift).items())
    rows: list[Any] = []
    for start in range(0, len(quotas), TERMS_PER_SELECT):
        ranges = [(tp, positions[tp], n) for tp, n in quotas[start : start + TERMS_PER_SELECT]]
        rows.extend(await conn.execute(range_select(ranges)))
    rank = {tp: i for i, (tp, _) in enumerate(quotas)}
    rows.sort(key=lambda row: (rank[row[0]], row[1]))
    return generation, rows


#: The tp_id of the row carrying the group's generation in ``_ENDS`` (partition ids are > 0).
_GENERATION_ROW = -1
_ENDS = sa.union_all(
    sa.select(sa.literal(_GENERATION_ROW), schema.groups.c.generation).where(
        schema.groups.c.grp == sa.bindparam("grp")
    ),
    sa.select(schema.partitions.c.id, schema.partitions.c.next_offset).where(
        schema.partitions.c.id.in_(sa.bindparam("tp_ids", expanding=True))
    ),
)


def fair_quotas(available: Mapping[int, int], max_records: int, shift: int) -> dict[int, int]:
    """Split ``max_records`` one by one over partitions with records, starting at ``shift``."""
    order = sorted(available)
    if not order:
        return {}
    shift %= len(order)
    active = order[shift:] + order[:shift]
    quotas = dict.fromkeys(active, 0)
    left = max_records
    while left and active:
        still = []
        for tp in active:
            if not left:
                break
            quotas[tp] += 1
            left -= 1
            if quotas[tp] < available[tp]:
                still.append(tp)
        active = still
    return {tp: n for tp, n in quotas.items() if n}


def range_select(ranges: Sequence[tuple[int, int, int]]) -> sa.Select[Any] | sa.CompoundSelect[Any]:
    """One SELECT of ``limit`` records from ``start`` per ``(tp_id, start, limit)``."""
    r = schema.records
    terms = []
    for tp, start, limit in ranges:
        sub = (
            sa.select(r.c.tp_id, r.c.offset, r.c.key, r.c.value, r.c.headers, r.c.timestamp_ms)
            .where(r.c.tp_id == tp, r.c.offset >= start)
            .order_by(r.c.offset)
            .limit(limit)
            .subquery()
        )
        terms.append(sa.select(sub))
    return terms[0] if len(terms) == 1 else sa.union_all(*terms)


def to_records(
    rows: Iterable[Any], directory: TopicDirectory, positions: dict[int, int]
) -> list[Record]:
    """Records of the rows whose partition is still in ``positions``, advancing each position."""
    out = []
    for tp_id, offset, key, value, headers, ts in rows:
        if tp_id not in positions:
            continue  # released meanwhile (a close() from another task)
        tp = directory.name(tp_id)
        parsed = json.loads(headers) if headers != "{}" else {}
        out.append(Record(tp.topic, tp.partition, offset, key, value, parsed, ts))
        positions[tp_id] = offset + 1
    return out
