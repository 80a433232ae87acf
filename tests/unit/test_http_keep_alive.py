"""The hub's HTTP servers keep an idle connection open longer than clients pool it."""

from __future__ import annotations

import httpx

from aigc_hub.settings import Settings


def test_an_idle_connection_outlives_the_httpx_pool_expiry() -> None:
    # Equal timeouts race: the client reuses the connection as the server closes it, and the
    # request fails with "Server disconnected without sending a response".
    expiry = httpx.Limits().keepalive_expiry
    assert expiry is not None
    assert Settings().api_keep_alive_s > 2 * expiry
