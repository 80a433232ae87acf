"""The error tree of the hub.

::

    HubError
    ├── RetryableError          a failure that may pass if tried again (timeouts, 5xx, locks)
    │   └── StaleTransition     a guarded update matched no row: re-read, then decide again
    │       └── TransitionNotAllowed  (core.states) the state machine forbids the move
    ├── PermanentError          a failure that no retry can fix: straight to the DLQ
    │   ├── InsufficientFunds   (reliability.ledger) a hold larger than the account's balance
    │   ├── EnvelopeError       bytes that are not a valid envelope (names the field)
    │   ├── SchemaError         unknown event type or version, or an invalid payload
    │   └── InvalidInput        a value names something invalid or unavailable (names the field)
    ├── NotFound                the thing named does not exist (or is another tenant's)
    ├── Conflict                the request contradicts what already is (finished, taken…)
    ├── ConfigurationError      settings or wiring that cannot work
    └── Retry                   flow control, not a failure: "try again after ``delay``"

A class's docstring is its default message. Every exception a pipeline raises derives from one
of these, so the HTTP kit answers it with the right status (404, 409, 422…), the CLI exits with
the right code, and the runtime knows whether to retry or dead-letter it. ``InvalidInput`` and
``NotFound`` also derive from ``ValueError`` / ``LookupError``, what Python code expects of them.
"""

from __future__ import annotations


class HubError(Exception):
    """An AIGC Hub error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or type(self).__name__).strip())

    @property
    def message(self) -> str:
        """The human-readable message."""
        return str(self.args[0]) if self.args else ""


class RetryableError(HubError):
    """A transient failure; the same work may succeed when tried again."""


class PermanentError(HubError):
    """A failure that retrying cannot fix; the message goes to the dead-letter queue."""


class EnvelopeError(PermanentError):
    """The bytes are not a valid event envelope."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"envelope field {field!r}: {problem}")


class SchemaError(PermanentError):
    """The event type, version or payload does not match a registered schema."""


class InvalidInput(PermanentError, ValueError):
    """A value names something invalid or unavailable."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


class NotFound(HubError, LookupError):
    """The thing named does not exist."""


class Conflict(HubError):
    """The request contradicts the current state of what it names."""


class StaleTransition(RetryableError):
    """A guarded state update matched no row: the state moved on or another writer won."""


class ConfigurationError(HubError):
    """The hub is configured or wired in a way that cannot work."""


class Retry(HubError):
    """Flow control: handle this message again after ``delay`` seconds; not an error."""

    def __init__(self, delay: float, reason: str = "deferred") -> None:
        self.delay = max(0.0, float(delay))
        self.reason = reason
        super().__init__(f"retry in {self.delay:g}s: {reason}")
