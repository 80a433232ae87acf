"""Dead-letter statuses are one enum; every status filter people use is built from it."""

from __future__ import annotations

from typing import get_args

import pytest

from aigc_hub.interfaces.console import dlq as console_dlq
from aigc_hub.interfaces.http import admin
from aigc_hub.reliability.dlq import STATUS_CHOICES, DeadLetterStatus, status_filter


def test_stored_status_strings_are_unchanged() -> None:
    assert [s.value for s in DeadLetterStatus] == ["pending", "replayed", "dismissed"]


def test_admin_api_and_console_offer_exactly_the_enum_statuses_and_any() -> None:
    assert STATUS_CHOICES == ("pending", "replayed", "dismissed", "any")
    assert get_args(admin.Status) == STATUS_CHOICES
    assert console_dlq.STATUSES == STATUS_CHOICES


def test_status_filter_maps_choices_and_names_the_valid_ones_for_a_typo() -> None:
    assert status_filter("dismissed") is DeadLetterStatus.DISMISSED
    assert status_filter("any") is None
    with pytest.raises(ValueError, match=r"unknown status 'pendng': use pending, replayed, "):
        status_filter("pendng")
