"""How long a vendor asks us to wait, read from its headers (the OpenAI embeddings adapter
hands it to the pipeline's backpressure with EmbedderOverloaded)."""

from __future__ import annotations

import datetime as dt
import email.utils

import httpx
import pytest

from aigc_hub.pipelines.documents.adapters.openai_embeddings import retry_after


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),  # the finer one wins
        ({"retry-after-ms": "soon", "retry-after": "2"}, 2.0),  # unusable: the other
        ({"retry-after": "-3"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "tomorrow"}, None),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date gone by
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 -0000"}, 0.0),  # no zone: UTC
    ],
)
def test_retry_after_reads_seconds_milliseconds_and_dates(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after(httpx.Headers(headers)) == seconds


def test_retry_after_as_a_future_http_date_is_the_time_until_it() -> None:
    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=120)
    waited = retry_after(httpx.Headers({"retry-after": email.utils.format_datetime(when, True)}))
    assert waited is not None and 110 < waited <= 120
