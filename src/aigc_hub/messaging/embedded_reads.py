"""How an embedded-log member reads: a fair share of ``max_records`` per owned partition,
fetched with one ``UNION ALL`` SELECT (one ranged term per partition), not a query per record.
"""

from __future__ import annotations

import operator
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
) -> tuple[int, list[list[Any]]]:
    """The group's generation (0 for no group, e.g. a tail), and per owned partition with
    records its rows ``(tp_id, offset, key, value, headers, timestamp_ms)`` from its position.

    Partitions come in turn (starting at ``shift``), each one's rows in offset order; none is
    empty. One statement reads the generation with the partitions' ends, and a second one the
    records only when some are there: an idle fetch costs one statement.
    """
    generation = 0
    available: dict[int, int] = {}
    for tp, end in await conn.execute(_ENDS, {"grp": group, "tp_ids": list(positions)}):
        if tp == _GENERATION_ROW:
            generation = end
        elif end > positions[tp]:
            available[tp] = end - positions[tp]
    quotas = list(fair_quotas(available, max_records, shift).items())
    by_partition: dict[int, list[Any]] = {tp: [] for tp, _ in quotas}
    for start in range(0, len(quotas), TERMS_PER_SELECT):
        ranges = [(tp, positions[tp], n) for tp, n in quotas[start : start + TERMS_PER_SELECT]]
        for row in (await conn.execute(range_select(ranges))).all():
            by_partition[row[0]].append(row)
    batches = [rows for rows in by_partition.values() if rows]
    for rows in batches:
        # SQL promises no order across UNION ALL terms; SQLite keeps it, so this only checks.
        rows.sort(key=_OFFSET)
    return generation, batches


_OFFSET = operator.itemgetter(1)

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
    """Split ``max_records`` over partitions with records (counts > 0), starting at ``shift``.

    The result is that of dealing records one by one round the partitions in turn (sorted
    ids rotated by ``shift``), skipping a partition once it has all it has: every partition
    gets ``min(available, level)`` and the first ``extra`` still holding more get one more.
    Computed from the sorted counts, so its cost grows with partitions, not with records.
    Keys come in dealing order (the order of the fetched batch); zero quotas are left out.
    """
    order = sorted(available)
    if not order:
        return {}
    shift %= len(order)
    dealing = order[shift:] + order[:shift]
    level, extra = _fill_level(sorted(available.values()), max_records)
    quotas: dict[int, int] = {}
    for tp in dealing:
        n = min(available[tp], level)
        if extra and available[tp] > level:
            n += 1
            extra -= 1
        if n:
            quotas[tp] = n
    return quotas


def _fill_level(counts: Sequence[int], budget: int) -> tuple[int, int]:
    """The full rounds ``level`` the deal completes, and the ``extra`` records of the next one.

    ``counts`` ascending. ``level`` is the largest with ``sum(min(c, level)) <= budget``; it is
    unbounded (every count) when all records fit, and then ``extra`` is 0.
    """
    dealt = 0
    for i, count in enumerate(counts):
        still = len(counts) - i  # partitions holding at least ``count`` records
        if dealt + count * still > budget:
            level = (budget - dealt) // still
            return level, budget - dealt - level * still
        dealt += count
    return counts[-1] if counts else 0, 0


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
    batches: Iterable[Sequence[Any]], directory: TopicDirectory, positions: dict[int, int]
) -> list[Record]:
    """Records of the batches whose partition is still in ``positions``, advancing each position.

    A batch is one partition's rows in offset order (see :func:`read_owned`), so its name is
    looked up and its position moved once, not per record.
    """
    out: list[Record] = []
    decode = schema.decode_headers
    for rows in batches:
        tp_id = rows[0][0]
        if tp_id not in positions:
            continue  # released meanwhile (a close() from another task)
        tp = directory.name(tp_id)
        topic, partition = tp.topic, tp.partition
        out.extend(
            [
                Record(topic, partition, offset, key, value, decode(headers), ts)
                for _, offset, key, value, headers, ts in rows
            ]
        )
        positions[tp_id] = rows[-1][1] + 1
    return out
