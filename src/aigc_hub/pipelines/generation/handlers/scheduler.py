"""The scheduler: which QUEUED task gets the next free slot (seed 004 §3.6.3, §3.9.4).

A pass reads the queue from the database (the queue *is* the QUEUED rows) and dispatches
in fair order until slots run out:

* across tenants, the tenant with the fewest tasks at providers per unit of weight goes next
  (weighted fair share, ``AIGC_HUB_GEN_TENANT_WEIGHTS``; weight 1 by default), so a tenant
  that floods the queue cannot starve another;
* within a tenant, the highest effective priority, where waiting raises priority by one
  step every ``aging_per_priority_s`` (low priority is delayed, never starved);
* a task whose level is full stays QUEUED; nothing busy-loops: passes run when a task is
  queued or a slot frees (events on ``generation.dispatch``) and when the QUEUED scanner
  finds the queue idle with work waiting.

Dispatching a task is one transaction: QUEUED → DISPATCHING, a new attempt with its stable
``provider_request_key``, and the ``AttemptDispatched`` event that makes the submitter call
the provider (never inside the transaction). It is a checkpoint (``ctx.checkpoint`` when a
handler runs the pass): the slots just leased must be recorded on the attempt before the
next task leases more, so each dispatch commits at once instead of with the inbox mark.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core import ids
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import StaleTransition
from aigc_hub.pipelines.generation import events, records
from aigc_hub.pipelines.generation.adapters.base import CapabilityError
from aigc_hub.pipelines.generation.models import generation_tasks, task_attempts
from aigc_hub.pipelines.generation.requests import request_of
from aigc_hub.pipelines.generation.rules import Queued, fair_order, slot_scopes
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.pipelines.generation.states import ACTIVE_AT_PROVIDER, AttemptStatus, TaskStatus
from aigc_hub.reliability.slots import Refusal
from aigc_hub.runtime.context import Checkpoint, HandlerContext, checkpoint
from aigc_hub.store.engine import reader

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

#: How many QUEUED tasks of one tenant a pass reads (its best by effective priority). A pass
#: can dispatch at most this many of a tenant's tasks; one that used them all runs again.
PER_TENANT = 32
#: How many QUEUED rows one pass reads at most, whatever the queue's length: each tenant's
#: best task first (oldest heads first), then each tenant's second… (``PER_TENANT`` each).
PASS_ROWS = 256


T = TypeVar("T")

#: Why a dispatch commits on its own (the checkpoint's reason).
DISPATCH_REASON = "the slots leased for an attempt must be recorded before the next lease"


def hub_checkpoint(hub: Hub) -> Checkpoint:
    """A checkpoint for callers outside a handler (the QUEUED scanner, tests)."""

    async def run(reason: str, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        return await checkpoint(hub.engine, reason, fn, committed=hub.relay.wake)

    return run


async def schedule(gen: Generation, record: Checkpoint | None = None) -> int:
    """Run passes until nothing more can be dispatched; returns how many were dispatched.

    Each dispatch commits through ``record`` (a handler passes ``ctx.checkpoint``).
    Concurrent callers in one process coalesce: the running pass runs once more for them.
    """
    hub = gen.hub
    record = record or hub_checkpoint(hub)
    if gen.schedule_lock.locked():
        gen.rerun = True
        return 0
    total = 0
    async with gen.schedule_lock:
        while True:
            gen.rerun = False
            total += await _pass(hub, gen, record)
            if not gen.rerun:
                return total


def queue_window(aging_ms: float) -> sa.Select[Any]:
    """The QUEUED rows a pass reads: each tenant's ``PER_TENANT`` best by effective priority
    (priority, raised one step per ``aging_ms`` waited), at most ``PASS_ROWS`` in all.

    The within-tenant order is :func:`~.rules.fair_order`'s: ``priority + (now - queued_at) /
    aging`` sorts like ``priority * aging - queued_at`` (``now`` is the same for every row),
    so SQL can rank without knowing the time. Tenants are then interleaved by rank, so the
    cap keeps every tenant's head before any tenant's second task.
    """
    t = generation_tasks
    effective = t.c.priority * sa.literal(float(aging_ms)) - t.c.queued_at
    rank = (
        sa.func.row_number()
        .over(partition_by=t.c.tenant_id, order_by=(effective.desc(), t.c.queued_at, t.c.id))
        .label("rank")
    )
    ranked = sa.select(t, rank).where(t.c.status == TaskStatus.QUEUED.value).subquery()
    columns = [ranked.c[c.name] for c in t.columns]
    return (
        sa.select(*columns, ranked.c.rank)
        .where(ranked.c.rank <= PER_TENANT)
        .order_by(ranked.c.rank, ranked.c.queued_at)
        .limit(PASS_ROWS)
    )


async def _pass(hub: Hub, gen: Generation, record: Checkpoint) -> int:
    now = hub.clock.now_ms()
    aging_ms = gen.settings.aging_per_priority_s * 1000
    async with reader(hub.engine) as conn:
        rows = (await conn.execute(queue_window(aging_ms))).all()
        gen.scheduler.passes += 1
        gen.scheduler.rows_read += len(rows)
        if not rows:
            return 0
        active_rows = await conn.execute(
            sa.select(generation_tasks.c.tenant_id, sa.func.count())
            .where(generation_tasks.c.status.in_([s.value for s in ACTIVE_AT_PROVIDER]))
            .group_by(generation_tasks.c.tenant_id)
        )
        active = {t: int(n) for t, n in active_rows}
    tasks = {r.id: dict(r._mapping) for r in rows}
    order = fair_order(
        [Queued(r.id, r.tenant_id, r.priority, r.queued_at) for r in rows],
        active,
        now,
        aging_ms,
        gen.settings.weights(),
    )
    dispatched = 0
    full_tenants: set[str] = set()
    served: Counter[str] = Counter()
    for q in order:
        if q.tenant_id in full_tenants:
            continue
        outcome = await _dispatch(hub, gen, tasks[q.id], record)
        if outcome == "platform":
            return dispatched  # nothing more can go until a slot frees (that wakes a pass)
        if outcome == "tenant":
            full_tenants.add(q.tenant_id)
        elif outcome == "dispatched":
            dispatched += 1
            served[q.tenant_id] += 1
        # An embedded database answers inline, so a pass would hold the event loop for its
        # whole window: let the API and the other handlers in between two dispatches.
        await asyncio.sleep(0)
    if dispatched and (len(rows) == PASS_ROWS or any(n == PER_TENANT for n in served.values())):
        gen.rerun = True  # the window held back work that may now go: look again
    # (A pass that dispatched nothing does not rerun: every tenant it saw was full.)
    return dispatched


async def _dispatch(hub: Hub, gen: Generation, task: dict[str, Any], record: Checkpoint) -> str:
    """Try to dispatch one task (its row as the pass read it; the guarded update refuses it
    if it moved since): "dispatched", "gone", "no_route" or the full level's name."""
    attempt_id = ids.new_id_str()
    try:
        route = gen.providers.route(request_of(task), attempt_id)
    except CapabilityError:
        route = None
    if route is None:
        return "no_route"
    breaker = gen.providers.breakers[route.provider]
    taken = await gen.slots.acquire(attempt_id, slot_scopes(task["tenant_id"], route))
    if isinstance(taken, Refusal):
        breaker.forfeit(attempt_id)
        return taken.level
    attempt_no = int(task["attempt_count"]) + 1
    request_key = f"{task['id']}-{attempt_no}"
    now = hub.clock.now_ms()
    dispatched = Envelope.new(
        events.ATTEMPT_DISPATCHED,
        events.AttemptDispatched(
            task_id=task["id"],
            attempt_id=attempt_id,
            provider=route.provider,
            model=route.model,
            request_key=request_key,
        ).model_dump(),
        key=task["id"],
        source="generation.scheduler",
        tenant_id=task["tenant_id"],
        correlation_id=task["id"],
    )

    async def write_dispatch(conn: AsyncConnection) -> None:
        await conn.execute(
            task_attempts.insert().values(
                id=attempt_id,
                task_id=task["id"],
                attempt_no=attempt_no,
                provider=route.provider,
                model=route.model,
                dispatch_token=attempt_id,
                provider_request_key=request_key,
                status=AttemptStatus.DISPATCHING.value,
                slots=taken,
                created_at=now,
            )
        )
        notes = await records.move(
            conn,
            task,
            TaskStatus.DISPATCHING,
            cause="scheduler.dispatch",
            now_ms=now,
            values={"current_attempt_id": attempt_id, "attempt_count": attempt_no},
            detail={"provider": route.provider, "attempt_no": attempt_no},
            deadline_ms=now + int(gen.settings.dispatching_deadline_s * 1000),
        )
        await hub.outbox.add(conn, [dispatched, *notes])

    try:
        await record(DISPATCH_REASON, write_dispatch)
    except (StaleTransition, sa.exc.IntegrityError):
        await gen.slots.release(attempt_id, taken)  # another pass took it first
        breaker.forfeit(attempt_id)
        return "gone"
    return "dispatched"


async def active_attempts(hub: Hub) -> list[dict[str, Any]]:
    """Attempts whose task is at a provider (or may be): the ones that hold slots."""
    statuses = [s.value for s in ACTIVE_AT_PROVIDER | {TaskStatus.CANCEL_REQUESTED}]
    async with reader(hub.engine) as conn:
        rows = await conn.execute(
            sa.select(
                task_attempts.c.id,
                task_attempts.c.slots,
                generation_tasks.c.tenant_id,
            )
            .join(generation_tasks, generation_tasks.c.current_attempt_id == task_attempts.c.id)
            .where(generation_tasks.c.status.in_(statuses))
        )
        return [dict(r._mapping) for r in rows]


async def on_wake(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """``generation-scheduler``: a queued task or a freed slot runs a scheduling pass."""
    if env.event_type in (events.TASK_QUEUED, events.SLOT_FREED):
        await schedule(gen, ctx.checkpoint)
    return []
