"""Standard Webhooks signing and verification: the spec's vector, rotation, every refusal."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aigc_hub.pipelines.generation import webhooks
from aigc_hub.pipelines.generation.webhooks import VerifiedWebhook, WebhookVerificationError

# The test vector published with the Standard Webhooks reference libraries.
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
TIMESTAMP = 1614265330
BODY = b'{"test": 2432232314}'
SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def headers(**overrides: str) -> dict[str, str]:
    base = {
        "webhook-id": MSG_ID,
        "webhook-timestamp": str(TIMESTAMP),
        "webhook-signature": SIGNATURE,
    }
    base.update({k.replace("_", "-"): v for k, v in overrides.items()})
    return base


def reason(secrets: list[str], hdrs: dict[str, str], body: bytes, now: float) -> str:
    with pytest.raises(WebhookVerificationError) as info:
        webhooks.verify(secrets, hdrs, body, now)
    return info.value.reason


def test_sign_matches_the_published_vector() -> None:
    assert webhooks.sign(SECRET, MSG_ID, TIMESTAMP, BODY) == SIGNATURE
    assert webhooks.sign(SECRET, MSG_ID, TIMESTAMP, BODY.decode()) == SIGNATURE


def test_verify_accepts_the_vector_and_returns_id_and_timestamp() -> None:
    assert webhooks.verify([SECRET], headers(), BODY, TIMESTAMP + 10) == VerifiedWebhook(
        MSG_ID, TIMESTAMP
    )


def test_header_names_are_case_insensitive() -> None:
    upper = {k.title(): v for k, v in headers().items()}
    assert webhooks.verify([SECRET], upper, BODY, TIMESTAMP).id == MSG_ID


def test_several_signatures_and_several_secrets_rotation() -> None:
    new = webhooks.generate_secret()
    old_sig = webhooks.sign(SECRET, MSG_ID, TIMESTAMP, BODY)
    new_sig = webhooks.sign(new, MSG_ID, TIMESTAMP, BODY)
    both = headers(webhook_signature=f"v1a,ignored {old_sig} {new_sig}")
    assert webhooks.verify([new], both, BODY, TIMESTAMP).id == MSG_ID
    assert webhooks.verify([new, SECRET], headers(), BODY, TIMESTAMP).id == MSG_ID
    assert reason([new], headers(), BODY, TIMESTAMP) == "bad_signature"


def test_sign_headers_round_trip() -> None:
    secret = webhooks.generate_secret()
    hdrs = webhooks.sign_headers(secret, "evt_1", 1_800_000_000, b"{}")
    assert webhooks.verify([secret], hdrs, b"{}", 1_800_000_000).timestamp == 1_800_000_000


@pytest.mark.parametrize(
    ("hdrs", "expected"),
    [
        ({"webhook-timestamp": str(TIMESTAMP), "webhook-signature": SIGNATURE}, "missing_header"),
        ({"webhook-id": MSG_ID, "webhook-signature": SIGNATURE}, "missing_header"),
        ({"webhook-id": MSG_ID, "webhook-timestamp": str(TIMESTAMP)}, "missing_header"),
        (headers(webhook_signature=""), "missing_header"),
        (headers(webhook_timestamp="16142653.30"), "malformed_header"),
        (headers(webhook_timestamp="-1614265330"), "malformed_header"),
        (headers(webhook_timestamp="9" * 40), "malformed_header"),
        (headers(webhook_signature="v1"), "malformed_header"),
        (headers(webhook_signature="v2,abc"), "malformed_header"),
        (headers(webhook_signature="v1,not base64!"), "malformed_header"),
        (headers(webhook_id="x" * 1000), "malformed_header"),
        (headers(webhook_signature="v1,AAAA"), "bad_signature"),
        (headers(webhook_id="msg_other"), "bad_signature"),
    ],
)
def test_refusals_have_stable_reasons(hdrs: dict[str, str], expected: str) -> None:
    assert reason([SECRET], hdrs, BODY, TIMESTAMP) == expected


def test_tampered_body_is_a_bad_signature() -> None:
    assert reason([SECRET], headers(), BODY + b" ", TIMESTAMP) == "bad_signature"


@pytest.mark.parametrize("skew", [-301, 301, 10**6])
def test_stale_or_future_timestamps_are_out_of_window(skew: int) -> None:
    assert reason([SECRET], headers(), BODY, TIMESTAMP + skew) == "timestamp_out_of_window"


def test_a_bad_secret_is_a_configuration_error() -> None:
    for bad in ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_!!", "whsec_"):
        with pytest.raises(ValueError):
            webhooks.decode_secret(bad)


header_values = st.one_of(
    st.text(max_size=80),
    st.just(MSG_ID),
    st.just(str(TIMESTAMP)),
    st.just(SIGNATURE),
    st.builds(lambda s: f"v1,{s}", st.text(max_size=60)),
    st.integers().map(str),
)
header_maps = st.dictionaries(
    st.sampled_from(
        ["webhook-id", "webhook-timestamp", "webhook-signature", "Webhook-Id", "other"]
    ),
    header_values,
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(hdrs=header_maps, body=st.binary(max_size=200), now=st.integers(0, 2**40))
def test_verify_raises_only_its_own_error_on_any_input(
    hdrs: dict[str, str], body: bytes, now: int
) -> None:
    try:
        webhooks.verify([SECRET], hdrs, body, now)
    except WebhookVerificationError as exc:
        assert exc.reason in {
            "missing_header",
            "malformed_header",
            "timestamp_out_of_window",
            "bad_signature",
        }
