"""Generation's webhook secret settings: every accepted form passes, garbage names its variable."""

from __future__ import annotations

import pydantic
import pytest
from tests.support.webhook_secrets import ACCEPTED_FORMS, GARBAGE, PADDED

from aigc_hub.pipelines.generation.settings import GenerationSettings


@pytest.mark.parametrize("setting", ["LOCAL_WEBHOOK_SECRETS", "REPLICATE_WEBHOOK_SECRETS"])
@pytest.mark.parametrize("bad", GARBAGE.values(), ids=GARBAGE.keys())
def test_a_garbage_secret_fails_settings_validation_naming_the_env_variable(
    monkeypatch: pytest.MonkeyPatch, setting: str, bad: str
) -> None:
    monkeypatch.setenv(f"AIGC_HUB_GEN_{setting}", f"{ACCEPTED_FORMS['bare, unpadded']},{bad}")
    with pytest.raises(pydantic.ValidationError) as info:
        GenerationSettings()
    message = str(info.value)
    assert f"AIGC_HUB_GEN_{setting}: secret 2:" in message
    assert PADDED.rstrip("=") not in message  # secrets stay out of the error


def test_every_accepted_secret_form_passes_settings_validation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIGC_HUB_GEN_LOCAL_WEBHOOK_SECRETS", ",".join(ACCEPTED_FORMS.values()))
    assert GenerationSettings().webhook_secrets("local") == list(ACCEPTED_FORMS.values())
