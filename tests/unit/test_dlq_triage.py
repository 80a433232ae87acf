"""Dead-letter triage (seed 003 FAQ Q6): the stored class name, looked up among the live
exception classes, says whether a retry is worth it; unknown names go by the attempts."""

from __future__ import annotations

import pytest

from aigc_hub.core import errors
from aigc_hub.pipelines.avcc.services import ContentRefused
from aigc_hub.pipelines.generation.services import ContentRejected
from aigc_hub.reliability.dlq import DeadLetter, DeadLetterStatus
from aigc_hub.reliability.dlq_triage import Triage, TriageKind, known_classes, triage

TRANSIENT, BAD, REFUSED = TriageKind.TRANSIENT, TriageKind.BAD_DATA, TriageKind.CONTENT_REFUSED


class PromptRefusedTwice(ContentRejected):
    """A pipeline's own refusal, derived from a content refusal."""


class ClashingName(errors.RetryableError):
    """One of two live classes named alike (see the module-level twin below)."""


_TRANSIENT_TWIN = ClashingName


class ClashingName(errors.InvalidInput):  # type: ignore[no-redef]
    """The other: a bad-data class of the same name."""


class PaymentDeclined(errors.Conflict):
    """A hub error of no family: judged by the attempts, like an unknown name."""


class BothWays(errors.NotFound, errors.Conflict):
    """Reached twice when walking the tree (under NotFound and under Conflict)."""


def letter(error_class: str, attempts: int = 1) -> DeadLetter:
    return DeadLetter(
        id=1,
        event_id="e",
        event_type="t",
        tenant_id=None,
        topic="documents-uploaded",
        partition=0,
        offset=0,
        key="k",
        consumer="chunking-workers",
        pipeline="documents",
        value=b"{}",
        headers={},
        error_class=error_class,
        error_message="boom",
        attempts=attempts,
        first_failure_at=0,
        last_failure_at=0,
        history=(),
        status=DeadLetterStatus.PENDING,
        created_at=0,
        resolved_at=None,
    )


@pytest.mark.parametrize(
    ("error_class", "attempts", "kind"),
    [
        # transient: the RetryableError family, whatever the attempts
        ("RetryableError", 11, TRANSIENT),
        ("HandlerTimeout", 11, TRANSIENT),  # runtime: the handler ran past its timeout
        ("ModerationUnavailable", 4, TRANSIENT),  # moderation's infrastructure, not a verdict
        ("StaleTransition", 1, TRANSIENT),
        ("TransitionNotAllowed", 1, TRANSIENT),  # a subclass of a subclass
        # bad data: the permanent family, named from the most specific family
        ("InvalidInput", 1, BAD),
        ("SchemaError", 1, BAD),
        ("EnvelopeError", 1, BAD),
        ("PermanentError", 1, BAD),
        ("InvalidRequest", 1, BAD),  # generation's, an InvalidInput
        ("InvalidMedia", 1, BAD),  # media's, a PermanentError
        ("EgressRefused", 1, BAD),
        # content refused: by name, subclasses included, before the InvalidInput family
        ("ContentRejected", 1, REFUSED),  # generation's prompt review (a PermanentError)
        ("ContentRefused", 1, REFUSED),  # avcc's precheck (an InvalidInput)
        ("PromptRefusedTwice", 1, REFUSED),
        # names shared by two live classes: the least retry-worthy verdict
        ("ClashingName", 11, BAD),
        # no family, or no live class of that name: by the attempts
        ("PaymentDeclined", 11, TRANSIENT),
        ("PaymentDeclined", 1, BAD),
        ("NotFound", 11, TRANSIENT),
        ("TimeoutError", 11, TRANSIENT),
        ("ConnectionResetError", 2, TRANSIENT),
        ("RejectedPlayback", 1, BAD),  # avcc-sink's undecodable record
        ("KeyError", 1, BAD),
    ],
)
def test_triage_table(error_class: str, attempts: int, kind: TriageKind) -> None:
    verdict = triage(letter(error_class, attempts))
    assert verdict.kind is kind
    assert verdict.retry_worthy is (kind is TRANSIENT)
    assert verdict.why.startswith(error_class) and "\n" not in verdict.why


def test_why_names_the_family_and_the_rule() -> None:
    assert triage(letter("InvalidRequest")).why.startswith("InvalidRequest (InvalidInput): ")
    assert "a transient failure" in triage(letter("HandlerTimeout")).why
    assert "(ContentRejected)" in triage(letter("PromptRefusedTwice")).why
    assert "never retry" in triage(letter("ContentRefused")).why
    assert "retried 11 times" in triage(letter("TimeoutError", 11)).why
    assert "first try" in triage(letter("KeyError", 1)).why


def test_a_refusal_is_refused_even_where_its_pipeline_is_not_loaded() -> None:
    # The CLI or another process may not have the pipeline's module: the name is enough.
    assert triage(letter("ContentRefused", 11), known={}).kind is REFUSED
    assert triage(letter("ContentRejected", 1), known={}) == triage(letter("ContentRejected"))


def test_the_registry_is_the_live_hub_error_tree_at_call_time() -> None:
    assert triage(letter("BornLater", 1)).kind is BAD  # not a live class yet: by attempts

    class BornLater(errors.RetryableError):
        """Defined after the first call, as a pipeline loaded later would be."""

    assert triage(letter("BornLater", 1)).kind is TRANSIENT
    known = known_classes()
    assert known["BornLater"] == (BornLater,)
    assert known["HubError"] == (errors.HubError,)
    # pipelines' errors are there (other modules may define a class of the same name)
    assert ContentRejected in known["ContentRejected"]
    assert ContentRefused in known["ContentRefused"]
    assert set(known["ClashingName"]) == {_TRANSIENT_TWIN, ClashingName}
    assert known["BothWays"] == (BothWays,)  # two hub bases, listed once


def test_one_registry_judges_many_letters_alike() -> None:
    known = known_classes()
    for name in ("HandlerTimeout", "SchemaError", "ContentRefused", "TimeoutError"):
        assert triage(letter(name, 3), known) == triage(letter(name, 3))
    assert isinstance(triage(letter("X")), Triage)
