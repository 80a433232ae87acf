"""Generation under provider faults (seed 004 §3.7): unknown submits, webhook chaos, forged
webhooks, 429 storms, cancel racing success, and tenant fairness — against the real local
provider process, a real API and the embedded log on SQLite."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from aigc_hub.pipelines.generation.models import (
    callback_events,
    generation_tasks,
    task_attempts,
    task_events,
)
from aigc_hub.reliability import webhooks
from tests.integration.test_generation_flow import ledger_types, submit, wait_terminal
from tests.support.generation import Stack, generation_stack
from tests.support.hubs import make_broker
from tests.support.provider import SECRET, ProviderServer, provider_server, require_ffmpeg

# A provider call still in flight when the stack shuts down can leave its socket to the
# garbage collector (seen rarely, under load); these tests check behaviour, not shutdown
# hygiene, so only that warning is let through here.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
)


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[ProviderServer]:
    require_ffmpeg()
    data = tmp_path / "provider"
    data.mkdir()
    with provider_server(data) as server:
        yield server


async def transitions(stack: Stack, task_id: str) -> list[tuple[str | None, str]]:
    async with stack.hub.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(task_events.c.from_status, task_events.c.to_status)
            .where(task_events.c.task_id == task_id)
            .order_by(task_events.c.id)
        )
        return [(r.from_status, r.to_status) for r in rows]


async def request_keys(stack: Stack, task_id: str) -> list[str]:
    async with stack.hub.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(task_attempts.c.provider_request_key).where(
                task_attempts.c.task_id == task_id
            )
        )
        return [r.provider_request_key for r in rows]


async def test_a_submit_that_times_out_is_reconciled_to_the_one_job_it_created(
    sqlite_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    provider.faults(accept_then_timeout_next=1, hang_s=4)
    async with generation_stack(
        sqlite_url, make_broker("embedded", tmp_path), provider, tmp_path
    ) as stack:
        client = stack.client(await stack.tenant("acme"))
        task = await submit(client)
        done = await wait_terminal(client, [task["task_id"]], timeout_s=60)
        assert done[task["task_id"]]["status"] == "SUCCEEDED"
        moves = await transitions(stack, task["task_id"])
        assert ("DISPATCHING", "SUBMIT_UNKNOWN") in moves, moves
        (key,) = await request_keys(stack, task["task_id"])  # no second attempt
        assert provider.stats()["jobs_by_request_key"][key] == 1
        assert provider.stats()["jobs"] == 1
        assert await ledger_types(stack, task["task_id"]) == ["RESERVE", "SETTLE"]
        await client.aclose()


@pytest.mark.parametrize(
    "faults",
    [
        {"duplicate_webhooks": True},
        {"reorder_webhooks": True},
        {"duplicate_webhooks": True, "reorder_webhooks": True},
        {"drop_webhooks": True},
    ],
    ids=["duplicated", "reordered", "duplicated+reordered", "lost"],
)
async def test_webhook_chaos_gives_one_transition_each_and_polling_recovers_lost_ones(
    sqlite_url: str, tmp_path: Path, provider: ProviderServer, faults: dict[str, Any]
) -> None:
    provider.faults(render_seconds=0.3, **faults)
    async with generation_stack(
        sqlite_url, make_broker("embedded", tmp_path), provider, tmp_path
    ) as stack:
        client = stack.client(await stack.tenant("acme"))
        ids = [(await submit(client))["task_id"] for _ in range(4)]
        done = await wait_terminal(client, ids, timeout_s=60)
        assert {s["status"] for s in done.values()} == {"SUCCEEDED"}
        for task_id in ids:
            moves = await transitions(stack, task_id)
            repeated = [m for m, n in Counter(moves).items() if n > 1]
            assert not repeated, (task_id, moves)
            assert moves[-1] == ("POST_PROCESSING", "SUCCEEDED")
            assert await ledger_types(stack, task_id) == ["RESERVE", "SETTLE"]
        assert provider.stats()["jobs"] == len(ids)
        await client.aclose()


def _signed(
    body: bytes, *, secret: str = SECRET, msg_id: str = "msg_x", ts: int | None = None
) -> dict[str, str]:
    return webhooks.sign_headers(secret, msg_id, int(ts if ts is not None else time.time()), body)


async def test_forged_stale_tampered_and_malformed_webhooks_get_401_and_change_nothing(
    sqlite_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    async with generation_stack(
        sqlite_url, make_broker("embedded", tmp_path), provider, tmp_path
    ) as stack:
        client = stack.client(await stack.tenant("acme"))
        task = await submit(client)
        await wait_terminal(client, [task["task_id"]], timeout_s=60)
        body = b'{"type":"job.updated","data":{"id":"job_1","status":"failed"}}'
        forged_secret = webhooks.generate_secret()
        cases = {
            "forged": (body, _signed(body, secret=forged_secret)),
            "stale": (body, _signed(body, ts=int(time.time()) - 3600)),
            "future": (body, _signed(body, ts=int(time.time()) + 3600)),
            "tampered": (body.replace(b"failed", b"succeeded"), _signed(body)),
            "no headers": (body, {}),
            "bad timestamp": (body, {**_signed(body), "webhook-timestamp": "soon"}),
            "bad signature": (body, {**_signed(body), "webhook-signature": "v1,%%%"}),
            "no version": (body, {**_signed(body), "webhook-signature": "abc"}),
        }
        async with stack.hub.engine.connect() as conn:
            before = (
                await conn.execute(sa.select(sa.func.count()).select_from(callback_events))
            ).scalar_one()
            snapshot = (await conn.execute(sa.select(generation_tasks))).all()
        async with httpx.AsyncClient(base_url=stack.api_url, trust_env=False) as anon:
            for name, (payload, headers) in cases.items():
                headers = {"content-type": "application/json", **headers}
                response = await anon.post("/v1/callbacks/local", content=payload, headers=headers)
                assert response.status_code == 401, (name, response.text)
                assert response.json()["type"].endswith("bad-webhook"), name
        async with stack.hub.engine.connect() as conn:
            after = (
                await conn.execute(sa.select(sa.func.count()).select_from(callback_events))
            ).scalar_one()
            assert (await conn.execute(sa.select(generation_tasks))).all() == snapshot
        assert after == before
        await client.aclose()


async def test_a_429_storm_backs_off_and_loses_nothing(
    sqlite_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    provider.faults(rate_limit_next=25, retry_after_s=1)
    async with generation_stack(
        sqlite_url, make_broker("embedded", tmp_path), provider, tmp_path
    ) as stack:
        client = stack.client(await stack.tenant("acme"))
        ids = [(await submit(client))["task_id"] for _ in range(5)]
        done = await wait_terminal(client, ids, timeout_s=90)
        assert {s["status"] for s in done.values()} == {"SUCCEEDED"}
        assert provider.stats()["jobs"] == len(ids)
        for task_id in ids:
            assert await ledger_types(stack, task_id) == ["RESERVE", "SETTLE"]
        await client.aclose()


async def test_cancel_racing_success_ends_in_one_terminal_state_the_ledger_agrees_with(
    sqlite_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    provider.faults(render_seconds=0.5)
    async with generation_stack(
        sqlite_url, make_broker("embedded", tmp_path), provider, tmp_path
    ) as stack:
        client = stack.client(await stack.tenant("acme"))
        ids = [(await submit(client))["task_id"] for _ in range(6)]
        # cancel each at a different moment: queued, dispatching, running, finishing
        for i, task_id in enumerate(ids):
            await asyncio.sleep(0.15 * i)
            response = await client.post(f"/v1/generation-tasks/{task_id}/cancel")
            assert response.status_code in (202, 409), response.text
        done = await wait_terminal(client, ids, timeout_s=60)
        outcomes = Counter(s["status"] for s in done.values())
        print("cancel race outcomes:", dict(outcomes))
        for task_id, snap in done.items():
            moves = await transitions(stack, task_id)
            terminal = [to for _, to in moves if to in ("SUCCEEDED", "FAILED", "CANCELED")]
            assert terminal == [snap["status"]], moves
            kinds = await ledger_types(stack, task_id)
            if snap["status"] == "SUCCEEDED":
                assert kinds == ["RESERVE", "SETTLE"]
            else:
                assert kinds in (["RESERVE", "RELEASE"], ["RESERVE", "SETTLE"]), kinds
        await client.aclose()


async def test_a_flooding_tenant_does_not_starve_another(
    sqlite_url: str, tmp_path: Path, provider: ProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    provider.faults(render_seconds=0.2)
    async with generation_stack(
        sqlite_url,
        make_broker("embedded", tmp_path),
        provider,
        tmp_path,
        slots_platform=4,
        slots_tenant=4,
    ) as stack:
        a = stack.client(await stack.tenant("flood"))
        b = stack.client(await stack.tenant("small"))
        a_ids: list[str] = []
        for _ in range(20):  # 500 tasks, 25 requests at a time
            a_ids += [t["task_id"] for t in await asyncio.gather(*(submit(a) for _ in range(25)))]
        b_ids = [t["task_id"] for t in await asyncio.gather(*(submit(b) for _ in range(10)))]
        b_queued_at = stack.hub.clock.now_ms()  # every B task is QUEUED from here on
        await wait_terminal(b, b_ids, timeout_s=120)
        async with stack.hub.engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(task_events.c.task_id, task_events.c.at)
                    .where(task_events.c.to_status == "DISPATCHING")
                    .order_by(task_events.c.id)
                )
            ).all()
        mine = set(b_ids)
        before = [r for r in rows if r.at < b_queued_at]
        after = ["B" if r.task_id in mine else "A" for r in rows if r.at >= b_queued_at]
        b_started_before = sum(1 for r in before if r.task_id in mine)
        waiting = 10 - b_started_before
        with capsys.disabled():
            print(
                f"\nA started {len(before) - b_started_before} tasks before B's 10 were queued; "
                f"start order after that: {''.join(after[:24])}"
            )
        # Fair share: the tenant with fewer tasks at providers goes next, so B starts within
        # the next few freed slots (a pass already under way may still place its A tasks in
        # the 4 platform slots) and then gets at least every other slot (equal weights) until
        # its tasks are all running, never waiting behind A's backlog of hundreds.
        assert "B" in after[:4], "".join(after[:24])
        assert after[: 2 * waiting + 4].count("B") >= waiting, "".join(after[:24])
        assert len(a_ids) == 500
        await a.aclose()
        await b.aclose()


async def test_slot_permits_lost_by_the_cache_are_rebuilt_from_the_database(
    sqlite_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    from aigc_hub.cache.base import Lease
    from aigc_hub.pipelines.generation.scanners import SlotScanner

    provider.faults(render_seconds=4)
    async with generation_stack(
        sqlite_url, make_broker("embedded", tmp_path), provider, tmp_path
    ) as stack:
        client = stack.client(await stack.tenant("acme"))
        ids = [(await submit(client))["task_id"] for _ in range(2)]
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            states = [(await client.get(f"/v1/generation-tasks/{t}")).json()["status"] for t in ids]
            if set(states) == {"RUNNING"}:
                break
            assert asyncio.get_running_loop().time() < deadline, states
            await asyncio.sleep(0.1)
        leases = stack.hub.cache.leases
        async with stack.hub.engine.connect() as conn:
            held = {
                r.id: list(r.slots)
                for r in await conn.execute(sa.select(task_attempts.c.id, task_attempts.c.slots))
            }
        assert all(len(names) == 4 for names in held.values())
        for owner, names in held.items():  # the cache forgets them (restart, eviction)
            for name in names:
                holder = await leases.holder(name)
                assert holder is not None and holder[0] == owner
                await leases.release(Lease(name, owner, holder[1], 0, 1))
                assert await leases.holder(name) is None
        scanner = SlotScanner(stack.gen)
        for finding in await scanner.find(stack.hub.clock.now_ms()):
            await scanner.repair(finding, stack.hub.clock.now_ms())
        for owner, names in held.items():
            for name in names:
                holder = await leases.holder(name)
                assert holder is not None and holder[0] == owner, name
        done = await wait_terminal(client, ids, timeout_s=60)
        assert {s["status"] for s in done.values()} == {"SUCCEEDED"}
        await client.aclose()
