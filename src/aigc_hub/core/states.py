"""State machines as values: the states of a row, the moves allowed between them, the ends.

A pipeline declares one :class:`StateMachine` per stateful table (a task, an attempt, a
settlement) and the store's :func:`~aigc_hub.store.transitions.move` consults it before the
guarded update, so a move not in the table never reaches the database. Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from aigc_hub.core.errors import StaleTransition

S = TypeVar("S", bound=enum.StrEnum)


class TransitionNotAllowed(StaleTransition):
    """The move is not in the state machine: the row as read may not make it."""

    def __init__(self, machine: str, current: str, target: str) -> None:
        self.machine = machine
        self.current = current
        self.target = target
        super().__init__(f"{machine}: {current} -> {target} is not allowed")


def _names(states: Iterable[enum.StrEnum]) -> list[str]:
    return sorted(s.value for s in states)


@dataclass(frozen=True)
class StateMachine(Generic[S]):
    """The states of ``name``, the moves out of each, and which states end it.

    Checked when built: every state has an entry, every target is a state, and a terminal
    state has no way out (so a late event after the end changes nothing).
    """

    name: str
    moves: Mapping[S, frozenset[S]]
    terminal: frozenset[S]
    _sources: Mapping[S, frozenset[S]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        states = set(self.moves)
        if not states:
            raise ValueError(f"{self.name}: a state machine needs at least one state")
        enum_type = type(next(iter(states)))
        missing = set(enum_type) - states
        if missing:
            raise ValueError(f"{self.name}: no entry for {_names(missing)}")
        for current, targets in self.moves.items():
            unknown = targets - states
            if unknown:
                raise ValueError(f"{self.name}: {current} moves to unknown {_names(unknown)}")
        for end in self.terminal:
            if self.moves.get(end):
                raise ValueError(f"{self.name}: terminal {end} has moves {_names(self.moves[end])}")
        sources = {s: frozenset(a for a, nexts in self.moves.items() if s in nexts) for s in states}
        # frozen dataclass: the reverse table is computed once, here.
        object.__setattr__(self, "_sources", sources)

    @property
    def states(self) -> frozenset[S]:
        """Every state of the machine."""
        return frozenset(self.moves)

    def can(self, current: S, target: S) -> bool:
        """True when ``current -> target`` is an allowed move."""
        return target in self.moves[current]

    def check(self, current: S, target: S) -> None:
        """Return if ``current -> target`` is allowed; else raise :class:`TransitionNotAllowed`."""
        if not self.can(current, target):
            raise TransitionNotAllowed(self.name, current.value, target.value)

    def is_terminal(self, state: S) -> bool:
        """True when ``state`` ends the row's life."""
        return state in self.terminal

    def sources_of(self, target: S) -> frozenset[S]:
        """Every state from which ``target`` may be reached."""
        return self._sources[target]

    def pairs(self) -> frozenset[tuple[S, S]]:
        """Every allowed ``(from, to)`` move (what a coverage test compares with history)."""
        return frozenset((a, b) for a, nexts in self.moves.items() for b in nexts)
