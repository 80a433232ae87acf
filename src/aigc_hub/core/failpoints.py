"""Injectable failpoints: named places where a test makes the code fail on purpose.

Production code calls ``failpoints.hit("relay.after_publish")``; nothing happens unless a
test armed that name. A :class:`Crash` simulates the process dying at that point: it is a
``BaseException`` so no ``except Exception`` in the path can swallow it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable


class Crash(BaseException):
    """Simulated process death at a failpoint."""


class Failpoints:
    """A registry of armed failpoints; unarmed names cost one dict lookup."""

    __hash__ = object.__hash__

    def __init__(self) -> None:
        self._armed: dict[str, Callable[[], None]] = {}
        self.hits: dict[str, int] = {}

    def arm(self, name: str, action: Callable[[], None]) -> None:
        """Run ``action`` (which may raise) each time ``name`` is hit."""
        self._armed[name] = action

    def crash_at(self, name: str, *, after: int = 1) -> None:
        """Raise :class:`Crash` on the ``after``-th hit of ``name`` (once)."""
        count = {"n": 0}

        def action() -> None:
            count["n"] += 1
            if count["n"] == after:
                raise Crash(f"failpoint {name} (hit {after})")

        self.arm(name, action)

    def disarm(self, name: str) -> None:
        """Stop acting at ``name``."""
        self._armed.pop(name, None)

    def hit(self, name: str) -> None:
        """Mark that execution passed ``name``; run its action when armed."""
        action = self._armed.get(name)
        if action is not None:
            self.hits[name] = self.hits.get(name, 0) + 1
            action()

    @classmethod
    def from_spec(cls, spec: str) -> Failpoints:
        """Failpoints armed by a spec such as ``"avcc.chain.after_submit=kill"``.

        For crash tests of real processes (like fail-rs's ``FAILPOINTS`` variable): a
        comma-separated list of ``name=action``; ``kill`` sends the process SIGKILL (no
        cleanup, no goodbye), ``crash`` raises :class:`Crash`, ``stop`` sends it SIGSTOP
        once (a process paused, by a debugger or a stalled VM, until SIGCONT). ValueError for
        anything else.
        """
        armed = cls()
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, _, action = item.partition("=")
            if action == "kill":
                armed.arm(name.strip(), _kill_self)
            elif action == "crash":
                armed.crash_at(name.strip())
            elif action == "stop":
                armed.arm(name.strip(), _stop_self_once())
            else:
                raise ValueError(f"failpoint {item!r}: expected name=kill, crash or stop")
        return armed


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _stop_self_once() -> Callable[[], None]:
    stopped = {"done": False}

    def action() -> None:
        if not stopped["done"]:
            stopped["done"] = True
            os.kill(os.getpid(), signal.SIGSTOP)

    return action


#: The shared no-op instance used when nothing is armed.
NONE = Failpoints()
