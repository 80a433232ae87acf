"""The package's public names are exactly ``__all__``, and each resolves."""

from __future__ import annotations

import aigc_hub

EXPECTED = {
    "Clock", "Envelope", "EnvelopeError", "HandlerContext", "Hub", "HubConfig", "HubError",
    "ManualClock",
    "PermanentError", "Pipeline", "Retry", "RetryDecision", "RetryPolicy", "RetryableError",
    "SchemaError", "Settings", "StaleTransition", "SystemClock", "TopicSpec", "__version__",
    "new_id", "transition",
}  # fmt: skip


def test_all_lists_exactly_the_public_names() -> None:
    assert set(aigc_hub.__all__) == EXPECTED
    assert len(aigc_hub.__all__) == len(EXPECTED)
    for name in aigc_hub.__all__:
        assert getattr(aigc_hub, name) is not None


def test_no_other_public_name_leaks() -> None:
    public = {
        n
        for n in vars(aigc_hub)
        if not n.startswith("_") and not isinstance(getattr(aigc_hub, n), type(aigc_hub))
    } - {"annotations"}  # the __future__ import
    assert public <= EXPECTED, public - EXPECTED
