"""``AIGC_HUB_CONSOLE_SECRET``: API processes that share it share console logins (behind a load
balancer, across restarts); another secret, or none (random per process), asks to log in."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from aigc_hub import tenancy
from aigc_hub.interfaces.console.auth import COOKIE
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.settings import Settings
from tests.support.hubs import hub_for, make_broker
from tests.support.served import serve

SHARED = "s" * 32


def test_the_setting_is_bytes_when_set_and_refused_when_short() -> None:
    assert Settings(console_secret=SHARED).console_secret_bytes() == SHARED.encode()  # type: ignore[arg-type]
    assert Settings().console_secret_bytes() is None
    with pytest.raises(ValidationError, match="at least 32 characters"):
        Settings(console_secret="short")  # type: ignore[arg-type]
    assert SHARED not in repr(Settings(console_secret=SHARED))  # type: ignore[arg-type]


async def _dlq_page(url: str, session: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, cookies={COOKIE: session}) as client:
        return await client.get("/console/dlq")


async def test_a_login_on_one_process_is_valid_on_another_with_the_same_secret(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with hub_for(sqlite_url, make_broker("memory", tmp_path), []) as hub:
        admin_key = await tenancy.create_admin_key(hub.engine)
        first = create_app(hub, console_secret=SHARED.encode())
        second = create_app(hub, console_secret=SHARED.encode())
        foreign = create_app(hub, console_secret=b"t" * 32)
        random = create_app(hub)
        async with (
            serve(first) as one,
            serve(second) as two,
            serve(foreign) as three,
            serve(random) as four,
        ):
            async with httpx.AsyncClient(base_url=one) as client:
                login = await client.post("/console/login", data={"key": admin_key})
            assert login.status_code == 303
            session = login.cookies[COOKIE]

            assert (await _dlq_page(one, session)).status_code == 200
            shared = await _dlq_page(two, session)
            assert shared.status_code == 200 and "Dead letters" in shared.text
            for elsewhere in (three, four):
                refused = await _dlq_page(elsewhere, session)
                assert refused.status_code == 303
                assert refused.headers["location"].startswith("/console/login")
