"""Is a dead letter worth a retry? Seed 003 FAQ Q6, decided from its stored error class.

Q6: retry when the failure was transient (a network error, an AI service overloaded, a
database timeout); give up when the data is bad (format, validation), and when a safety check
refused the content, because retrying would only try to get around the check.

A dead letter stores its error's class *name* only (``error_class``), so the name is looked
up among the live exception classes: :func:`known_classes` walks ``HubError``'s subclasses
at call time, and by then every loaded pipeline's errors are there too (they all derive from
it). The rules, first match wins:

1. a class named like a content refusal (:data:`CONTENT_REFUSALS`: itself or a base; the
   bare name too, where its pipeline is not loaded) is ``content_refused``: the pipelines'
   ``ContentRejected`` (generation's prompt review) and ``ContentRefused`` (avcc's
   precheck). Moderation itself raises no refusal: a verdict is a value, and its only
   error, ``ModerationUnavailable``, is retryable and so transient;
2. a ``RetryableError`` (``HandlerTimeout``, ``StaleTransition``, ``ModerationUnavailable``…)
   is ``transient``;
3. ``InvalidInput``, ``SchemaError``, ``EnvelopeError`` and any other ``PermanentError`` are
   ``bad_data``: the code that raised them said no retry can fix them;
4. anything else (a name no live ``HubError`` has, such as ``TimeoutError`` or
   ``RejectedPlayback``, or a hub error of no family: ``NotFound``, ``Conflict``,
   ``ConfigurationError``) is judged by what the runtime did with it: it retries every error
   that is not permanent, so a letter that went through retries (``attempts > 1``) failed
   like a transient error would, and one dead-lettered at its first try is ``bad_data``.

Two live classes may share a name (two pipelines' ``TaskNotFound``): then the least
retry-worthy verdict among them wins, so a refusal is never offered for a retry by mistake.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from aigc_hub.core import errors
from aigc_hub.reliability.dlq import DeadLetter


class TriageKind(enum.StrEnum):
    """Why a dead letter failed, as seed 003 FAQ Q6 sorts failures."""

    TRANSIENT = "transient"
    BAD_DATA = "bad_data"
    CONTENT_REFUSED = "content_refused"


#: The kinds worth a retry (replay) once the cause is gone.
RETRY_WORTHY: frozenset[TriageKind] = frozenset({TriageKind.TRANSIENT})

#: Class names of a safety check's refusal of the content (rule 1), wherever they are defined.
CONTENT_REFUSALS: frozenset[str] = frozenset({"ContentRejected", "ContentRefused"})

#: Error families that mean bad data (rule 3), most specific first: the one named in ``why``.
BAD_DATA_FAMILIES: tuple[type[errors.HubError], ...] = (
    errors.InvalidInput,
    errors.SchemaError,
    errors.EnvelopeError,
    errors.PermanentError,
)

#: Live exception classes by name, as :func:`known_classes` finds them.
KnownClasses = Mapping[str, tuple[type[BaseException], ...]]

#: The order of "least retry-worthy first", for names shared by several classes.
_STRICTNESS = (TriageKind.CONTENT_REFUSED, TriageKind.BAD_DATA, TriageKind.TRANSIENT)


@dataclass(frozen=True)
class Triage:
    """A dead letter's verdict: its kind, whether a retry is worth it, and why in one line."""

    kind: TriageKind
    retry_worthy: bool
    why: str


def known_classes() -> dict[str, tuple[type[BaseException], ...]]:
    """Every live ``HubError`` subclass (the root included) by class name, now.

    Built at call time, not import time: a pipeline loaded later is found too.
    """
    found: dict[str, list[type[BaseException]]] = {}
    seen: set[type[BaseException]] = set()
    stack: list[type[BaseException]] = [errors.HubError]
    while stack:
        cls = stack.pop()
        if cls in seen:  # a class with two hub bases is reached twice
            continue
        seen.add(cls)
        found.setdefault(cls.__name__, []).append(cls)
        stack.extend(cls.__subclasses__())
    return {name: tuple(classes) for name, classes in found.items()}


def triage(letter: DeadLetter, known: KnownClasses | None = None) -> Triage:
    """The verdict on ``letter``; pass one :func:`known_classes` to judge many letters."""
    if letter.error_class in CONTENT_REFUSALS:  # even where its pipeline is not loaded
        return _refused(letter.error_class, letter.error_class)
    classes = tuple((known_classes() if known is None else known).get(letter.error_class, ()))
    verdicts = [v for v in (_by_class(c) for c in classes) if v is not None]
    if verdicts:
        return min(verdicts, key=lambda v: _STRICTNESS.index(v.kind))
    return _by_attempts(letter)


def _by_class(cls: type[BaseException]) -> Triage | None:
    """Rules 1-3 for one class; None when it belongs to none of their families."""
    name = cls.__name__
    refusal = next((c.__name__ for c in cls.__mro__ if c.__name__ in CONTENT_REFUSALS), None)
    if refusal is not None:
        return _refused(name, refusal)
    if issubclass(cls, errors.RetryableError):
        return _verdict(
            TriageKind.TRANSIENT,
            f"{name}{_family(cls, errors.RetryableError)}: a transient failure; "
            "replay it once the service or network is back",
        )
    for family in BAD_DATA_FAMILIES:
        if issubclass(cls, family):
            return _verdict(
                TriageKind.BAD_DATA,
                f"{name}{_family(cls, family)}: the data is bad and a retry fails the same way; "
                "fix the producer or the data, then dismiss it",
            )
    return None


def _by_attempts(letter: DeadLetter) -> Triage:
    """Rule 4: a class of no family, judged by whether the runtime retried it."""
    name = letter.error_class
    if letter.attempts > 1:
        return _verdict(
            TriageKind.TRANSIENT,
            f"{name}: not a known failure kind, retried {letter.attempts} times as transient "
            "failures are; replay it once the cause is fixed",
        )
    return _verdict(
        TriageKind.BAD_DATA,
        f"{name}: not a known failure kind, given up at its first try as bad data is; "
        "look at the data before replaying it",
    )


def _refused(name: str, refusal: str) -> Triage:
    base = "" if refusal == name else f" ({refusal})"
    return _verdict(
        TriageKind.CONTENT_REFUSED,
        f"{name}{base}: a safety check refused the content; never retry to get around it",
    )


def _family(cls: type[BaseException], family: type[errors.HubError]) -> str:
    return "" if cls is family else f" ({family.__name__})"


def _verdict(kind: TriageKind, why: str) -> Triage:
    return Triage(kind=kind, retry_worthy=kind in RETRY_WORTHY, why=why)
