"""The backbone's transition-with-history helper on SQLite and PostgreSQL: the machine check,
the guarded update, the history row and the announced events in one transaction."""

from __future__ import annotations

import enum
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import StaleTransition
from aigc_hub.core.states import StateMachine, TransitionNotAllowed
from aigc_hub.store.transitions import History, Stateful, move, move_from_any


class Order(enum.StrEnum):
    OPEN = "OPEN"
    PAID = "PAID"
    SHIPPED = "SHIPPED"
    VOID = "VOID"


O = Order  # noqa: E741

ORDERS = StateMachine(
    "order",
    {
        O.OPEN: frozenset({O.PAID, O.VOID}),
        O.PAID: frozenset({O.SHIPPED, O.VOID}),
        O.SHIPPED: frozenset(),
        O.VOID: frozenset(),
    },
    frozenset({O.SHIPPED, O.VOID}),
)

meta = sa.MetaData()
orders = sa.Table(
    "test_orders",
    meta,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("status_version", sa.Integer, nullable=False),
    sa.Column("note", sa.String(100), nullable=True),
)
order_events = sa.Table(
    "test_order_events",
    meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("order_id", sa.String(36), nullable=False),
    sa.Column("from_status", sa.String(20), nullable=True),
    sa.Column("to_status", sa.String(20), nullable=False),
    sa.Column("status_version", sa.Integer, nullable=False),
    sa.Column("cause", sa.String(40), nullable=False),
)
#: A row kind without a version column or a history of its own (like generation's attempts).
parcels = sa.Table(
    "test_parcels",
    meta,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("note", sa.String(100), nullable=True),
)

ORDER_ROWS = Stateful(orders, ORDERS, history=History(order_events))
PARCEL_ROWS = Stateful(parcels, ORDERS, history=None, version_column=None)


@pytest.fixture
async def order(db: AsyncEngine) -> str:
    """An OPEN order at version 0 and an OPEN parcel with the same id."""
    row_id = str(uuid.uuid4())
    async with db.begin() as conn:
        await conn.run_sync(meta.create_all)
        await conn.execute(orders.insert().values(id=row_id, status="OPEN", status_version=0))
        await conn.execute(parcels.insert().values(id=row_id, status="OPEN"))
    return row_id


async def _state(db: AsyncEngine, row_id: str) -> tuple[tuple[str, int], list[tuple[object, ...]]]:
    async with db.connect() as conn:
        row = (await conn.execute(sa.select(orders).where(orders.c.id == row_id))).one()
        history = await conn.execute(
            sa.select(
                order_events.c.from_status,
                order_events.c.to_status,
                order_events.c.status_version,
                order_events.c.cause,
            ).order_by(order_events.c.id)
        )
        return (row.status, row.status_version), [tuple(h) for h in history]


def _note(version: int | None) -> list[Envelope]:
    return [Envelope.new("order.changed", {"version": version}, key="o", source="test")]


async def test_a_move_updates_the_row_records_history_and_announces(
    db: AsyncEngine, order: str
) -> None:
    async with db.begin() as conn:
        moved = await move(
            conn,
            ORDER_ROWS,
            order,
            current=O.OPEN,
            to=O.PAID,
            seen_version=0,
            values={"note": "card"},
            record={"order_id": order, "cause": "payment"},
            announce=_note,
        )
    assert (moved.source, moved.target, moved.version) == (O.OPEN, O.PAID, 1)
    assert [e.payload for e in moved.events] == [{"version": 1}]
    assert await _state(db, order) == (("PAID", 1), [("OPEN", "PAID", 1, "payment")])


async def test_a_move_the_machine_forbids_writes_nothing(db: AsyncEngine, order: str) -> None:
    async with db.begin() as conn:
        with pytest.raises(TransitionNotAllowed, match="order: OPEN -> SHIPPED"):
            await move(
                conn,
                ORDER_ROWS,
                order,
                current=O.OPEN,
                to=O.SHIPPED,
                seen_version=0,
                record={"order_id": order, "cause": "skip"},
            )
    assert await _state(db, order) == (("OPEN", 0), [])


async def test_a_stale_version_writes_no_row_and_no_history(db: AsyncEngine, order: str) -> None:
    async with db.begin() as conn:
        await move(
            conn,
            ORDER_ROWS,
            order,
            current=O.OPEN,
            to=O.PAID,
            seen_version=0,
            record={"order_id": order, "cause": "first"},
        )
    with pytest.raises(StaleTransition, match="status_version=0"):
        async with db.begin() as conn:
            await move(
                conn,
                ORDER_ROWS,
                order,
                current=O.OPEN,
                to=O.VOID,
                seen_version=0,
                record={"order_id": order, "cause": "late"},
                announce=_note,
            )
    assert await _state(db, order) == (("PAID", 1), [("OPEN", "PAID", 1, "first")])


async def test_a_row_without_version_or_history_is_guarded_by_its_status(
    db: AsyncEngine, order: str
) -> None:
    async with db.begin() as conn:
        moved = await move(
            conn,
            PARCEL_ROWS,
            order,
            current=O.OPEN,
            to=O.PAID,
            seen_version=None,
            values={"note": "x"},
        )
    assert moved.version is None and moved.events == ()
    with pytest.raises(StaleTransition, match="expected status='OPEN'"):
        async with db.begin() as conn:
            await move(conn, PARCEL_ROWS, order, current=O.OPEN, to=O.VOID, seen_version=None)
    async with db.connect() as conn:
        row = (await conn.execute(sa.select(parcels).where(parcels.c.id == order))).one()
    assert (row.status, row.note) == ("PAID", "x")
    assert (await _state(db, order))[1] == []  # no history written anywhere


async def test_the_helper_refuses_calls_that_do_not_fit_the_row_kind(
    db: AsyncEngine, order: str
) -> None:
    async with db.begin() as conn:
        with pytest.raises(ValueError, match="seen_version is required"):
            await move(conn, ORDER_ROWS, order, current=O.OPEN, to=O.PAID, seen_version=None)
        with pytest.raises(ValueError, match="seen_version must be None"):
            await move(conn, PARCEL_ROWS, order, current=O.OPEN, to=O.PAID, seen_version=0)
    async with db.begin() as conn:
        with pytest.raises(ValueError, match="keeps no history"):
            await move(
                conn,
                PARCEL_ROWS,
                order,
                current=O.OPEN,
                to=O.PAID,
                seen_version=None,
                record={"cause": "x"},
            )
    async with db.connect() as conn:
        status = (
            await conn.execute(sa.select(parcels.c.status).where(parcels.c.id == order))
        ).scalar_one()
    assert status == "OPEN"  # refused before any write


async def _parcel(db: AsyncEngine, row_id: str) -> tuple[str, str | None] | None:
    async with db.connect() as conn:
        row = (await conn.execute(sa.select(parcels).where(parcels.c.id == row_id))).first()
    return None if row is None else (row.status, row.note)


async def test_a_move_from_any_allowed_state_takes_one_update_and_tells_repeats_apart(
    db: AsyncEngine, order: str
) -> None:
    async with db.begin() as conn:
        assert await move_from_any(conn, PARCEL_ROWS, order, to=O.PAID, values={"note": "a"})
    async with db.begin() as conn:  # a repeated observation: already there, nothing written
        assert not await move_from_any(conn, PARCEL_ROWS, order, to=O.PAID, values={"note": "b"})
    async with db.begin() as conn:  # an unknown row: nothing to move
        assert not await move_from_any(conn, PARCEL_ROWS, str(uuid.uuid4()), to=O.PAID)
    assert await _parcel(db, order) == ("PAID", "a")
    async with db.begin() as conn:  # PAID -> SHIPPED is allowed from where the row stands
        assert await move_from_any(conn, PARCEL_ROWS, order, to=O.SHIPPED)
    with pytest.raises(TransitionNotAllowed):  # SHIPPED is terminal: the machine refuses
        async with db.begin() as conn:
            await move_from_any(conn, PARCEL_ROWS, order, to=O.VOID, values={"note": "c"})
    assert await _parcel(db, order) == ("SHIPPED", "a")


async def test_a_move_from_any_state_refuses_a_row_kind_that_keeps_history(
    db: AsyncEngine, order: str
) -> None:
    async with db.begin() as conn:
        with pytest.raises(ValueError, match="use move"):
            await move_from_any(conn, ORDER_ROWS, order, to=O.PAID)
        with pytest.raises(ValueError, match="may not set"):
            await move_from_any(conn, PARCEL_ROWS, order, to=O.PAID, values={"status": "VOID"})
    assert await _parcel(db, order) == ("OPEN", None)
