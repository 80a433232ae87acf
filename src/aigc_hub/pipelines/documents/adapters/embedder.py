"""The embedding seam of the documents pipeline: one small protocol, and its failures.

An embedder turns a batch of chunk texts into one unit-length float32 row each. Its
:attr:`Embedder.name` is a *model version* and becomes the namespace of the vectors it
makes: vectors of two names are never compared, so a change of weights (or of vendor model)
shows up as a new namespace instead of silently mixed neighbours (§4.2).

The failures say what the embedding worker does next (§4.2, §7)::

    RetryableError
    ├── EmbedderOverloaded   the vendor pushes back (429/503): retry later, and turn
    │                        backpressure on (``retry_after_s`` when the vendor said when)
    └── EmbedderUnavailable  timeouts, connection errors, other 5xx: retry
    PermanentError
    └── EmbeddingRefused     the vendor refuses this input (400/401/413/422): never retried
    ConfigurationError
    ├── EmbedderMissing      the ``ml`` extra is not installed
    └── DimensionMismatch    the model answers with another dimension than configured
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol

from aigc_hub.core.errors import ConfigurationError, PermanentError, RetryableError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

ML_EXTRA_HINT: Final = "pip install 'aigc-hub[ml]'"


class Embedder(Protocol):
    """Embeds batches of texts; one instance is shared by a worker's tasks (async safe)."""

    #: The model version the vectors belong to, e.g. ``all-MiniLM-L6-v2@sha256:53aa…`` or
    #: ``openai:text-embedding-3-small``: the vector namespace.
    name: str
    #: The length of every row :meth:`embed` returns.
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One row per text, in order, L2-normalised; ``(0, dimensions)`` for no text.

        Raises the errors of this module; a batch either embeds whole or fails whole.
        """
        ...

    async def close(self) -> None:
        """Release threads and connections; the embedder is unusable after."""
        ...


class EmbedderOverloaded(RetryableError):
    """The embedding service is overloaded (429/503): retry later, with backpressure on."""

    def __init__(self, message: str | None = None, *, retry_after_s: float | None = None) -> None:
        #: How long the vendor asked us to wait (its ``Retry-After``), when it said.
        self.retry_after_s = retry_after_s
        super().__init__(message)


class EmbedderUnavailable(RetryableError):
    """The embedding service could not be reached or did not answer in time."""


class EmbeddingRefused(PermanentError):
    """The embedding service refused the input; sending it again cannot succeed."""

    def __init__(self, message: str | None = None, *, status: int | None = None) -> None:
        #: The vendor's HTTP status, when the refusal came over HTTP.
        self.status = status
        super().__init__(message)


class EmbedderMissing(ConfigurationError):
    """Local embedding needs the ``ml`` extra: pip install 'aigc-hub[ml]'."""


class DimensionMismatch(ConfigurationError):
    """The embedding model answers with another dimension than the one configured."""

    def __init__(self, name: str, configured: int, answered: int) -> None:
        self.configured = configured
        self.answered = answered
        super().__init__(
            f"embedder {name} is configured for {configured} dimensions "
            f"but the model answered {answered}"
        )


class AbsentEmbedder:
    """Stands where the configured model could not be made (the ``ml`` extra is missing):
    the hub still starts, submitting a document answers 503 with ``reason`` and the fix,
    and a chunk that reaches the embedding group fails with :class:`EmbedderMissing`."""

    def __init__(self, reason: str, name: str = "all-MiniLM-L6-v2", dimensions: int = 384) -> None:
        self.reason = reason
        self.name = name
        self.dimensions = dimensions

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise EmbedderMissing(self.reason)

    async def close(self) -> None:
        """Nothing to release."""
