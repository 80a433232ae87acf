"""The seed's one consumer group (``vistack-consumer-group``): each record to the handler of
its event type.

The seed runs ``[kafka].concurrency`` sequential consumers per worker over its topics; here
one group reads ``transcode``, ``delete_file`` and ``comment`` with that many records in work
at once (each video's records in order, its key being the video).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import PermanentError
from aigc_hub.runtime.context import HandlerContext

from ..state import Vistack

TypedHandler = Callable[[Vistack, Envelope, HandlerContext], Awaitable[list[Envelope]]]

TypedDeadLetterHook = Callable[[Vistack, AsyncConnection, Envelope, BaseException], Awaitable[None]]

#: The handler of each event type the group reads; filled by the handler modules' imports
#: in ``pipeline.py``.
HANDLERS: dict[str, TypedHandler] = {}
#: What a dead letter of each event type also changes, in the dead letter's transaction.
DEAD_LETTER_HOOKS: dict[str, TypedDeadLetterHook] = {}


def handles(event_type: str) -> Callable[[TypedHandler], TypedHandler]:
    """Decorator: ``fn`` handles ``event_type`` in the seed's consumer group."""

    def register(fn: TypedHandler) -> TypedHandler:
        HANDLERS[event_type] = fn
        return fn

    return register


def on_dead_letter_of(event_type: str) -> Callable[[TypedDeadLetterHook], TypedDeadLetterHook]:
    """Decorator: ``fn`` runs when a record of ``event_type`` is dead-lettered."""

    def register(fn: TypedDeadLetterHook) -> TypedDeadLetterHook:
        DEAD_LETTER_HOOKS[event_type] = fn
        return fn

    return register


async def on_record(vs: Vistack, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Hand ``env`` to its type's handler; a type this group does not know is dead-lettered."""
    handler = HANDLERS.get(env.event_type)
    if handler is None:
        raise PermanentError(f"vistack-consumer-group has no handler for {env.event_type!r}")
    return await handler(vs, env, ctx)


async def on_dead_letter(
    vs: Vistack, conn: AsyncConnection, env: Envelope, error: BaseException
) -> None:
    """Run the dead-lettered record's type's hook, if it has one."""
    hook = DEAD_LETTER_HOOKS.get(env.event_type)
    if hook is not None:
        await hook(vs, conn, env, error)
