"""Handler middleware: ``async (call_next, envelope, ctx) -> list[Envelope]``, outermost first."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from aigc_hub.core.envelope import Envelope
from aigc_hub.runtime.context import HandlerContext

Next = Callable[[Envelope, HandlerContext], Awaitable[list[Envelope]]]
Middleware = Callable[[Next, Envelope, HandlerContext], Awaitable[list[Envelope]]]


def compose(middlewares: Sequence[Middleware], terminal: Next) -> Next:
    """Wrap ``terminal`` so that ``middlewares[0]`` runs first and calls the next one."""
    call: Next = terminal
    for mw in reversed(middlewares):
        call = partial(mw, call)
    return call
