"""Standard Webhooks signing and verification: the spec's vector, rotation, every refusal."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.webhook_secrets import ACCEPTED_FORMS, GARBAGE, KEY

from aigc_hub.core.errors import ConfigurationError, PermanentError
from aigc_hub.reliability import webhooks
from aigc_hub.reliability.webhooks import (
    VerifiedWebhook,
    WebhookSecretError,
    WebhookVerificationError,
    WebhookVerifier,
)

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


def delivery_signed_by_hand(key: bytes) -> dict[str, str]:
    """Standard Webhooks headers computed here from the raw key, not by the code under test."""
    digest = hmac.new(key, f"{MSG_ID}.{TIMESTAMP}.".encode() + BODY, hashlib.sha256).digest()
    return headers(webhook_signature="v1," + base64.b64encode(digest).decode())


@pytest.mark.parametrize("secret", ACCEPTED_FORMS.values(), ids=ACCEPTED_FORMS.keys())
def test_each_secret_form_the_reference_accepts_verifies_a_signed_delivery(secret: str) -> None:
    assert webhooks.decode_secret(secret) == KEY
    seen = webhooks.verify([secret], delivery_signed_by_hand(KEY), BODY, TIMESTAMP)
    assert seen == VerifiedWebhook(MSG_ID, TIMESTAMP)
    signed_by_hand = delivery_signed_by_hand(KEY)["webhook-signature"]
    assert webhooks.sign(secret, MSG_ID, TIMESTAMP, BODY) == signed_by_hand


def test_the_published_vector_verifies_without_the_prefix() -> None:
    bare = SECRET.removeprefix("whsec_")
    assert webhooks.verify([bare], headers(), BODY, TIMESTAMP).id == MSG_ID


@pytest.mark.parametrize("bad", GARBAGE.values(), ids=GARBAGE.keys())
def test_a_garbage_secret_is_a_configuration_error(bad: str) -> None:
    with pytest.raises(WebhookSecretError, match="webhook secret") as info:
        webhooks.decode_secret(bad)
    # in the hub's error tree, and still a ValueError for callers that validate settings
    assert isinstance(info.value, ConfigurationError) and isinstance(info.value, ValueError)
    with pytest.raises(WebhookSecretError):
        webhooks.StandardWebhooks([SECRET, bad])  # refused when built, not per delivery


def test_the_standard_webhooks_verifier_checks_deliveries_against_all_its_secrets() -> None:
    verifier: WebhookVerifier = webhooks.StandardWebhooks([webhooks.generate_secret(), SECRET])
    assert verifier.verify(headers(), BODY, TIMESTAMP) == VerifiedWebhook(MSG_ID, TIMESTAMP)
    with pytest.raises(WebhookVerificationError) as info:
        verifier.verify(headers(), BODY + b" ", TIMESTAMP)
    assert info.value.reason == "bad_signature"
    assert isinstance(info.value, PermanentError)  # the same delivery never passes later
    narrow = webhooks.StandardWebhooks([SECRET], tolerance_s=10)
    with pytest.raises(WebhookVerificationError, match="timestamp_out_of_window"):
        narrow.verify(headers(), BODY, TIMESTAMP + 11)
    with pytest.raises(ConfigurationError, match="tolerance"):
        webhooks.StandardWebhooks([SECRET], tolerance_s=-1)


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
