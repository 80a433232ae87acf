"""The lane pool: per-key order, a bounded number of worker tasks, blocked keys hold only
themselves."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from aigc_hub.runtime.lanes import Lanes


async def _all_done(done: asyncio.Event) -> None:
    async with asyncio.timeout(30):
        await done.wait()


async def test_each_key_keeps_its_order_with_many_keys_and_few_workers() -> None:
    rng = random.Random(7)
    served: dict[str, list[int]] = {}
    running = 0
    most_running = 0
    total = 200 * 5
    done = asyncio.Event()

    async def serve(item: tuple[str, int]) -> None:
        nonlocal running, most_running
        running += 1
        most_running = max(most_running, running)
        for _ in range(rng.randrange(3)):  # interleave keys differently at each step
            await asyncio.sleep(0)
        served.setdefault(item[0], []).append(item[1])
        running -= 1
        if sum(len(v) for v in served.values()) == total:
            done.set()

    lanes: Lanes[tuple[str, int]] = Lanes(serve, workers=3, name="order")
    items = [(f"k{k}", n) for n in range(5) for k in range(200)]
    for key, n in items:
        lanes.put(key, (key, n))
    await _all_done(done)

    assert served == {f"k{k}": [0, 1, 2, 3, 4] for k in range(200)}
    assert most_running == 3
    assert await lanes.join(5)
    assert lanes.pending() == 0


async def test_a_blocked_key_holds_only_its_own_items() -> None:
    release = asyncio.Event()
    served: list[tuple[str, int]] = []
    others_done = asyncio.Event()
    all_done = asyncio.Event()

    async def serve(item: tuple[str, int]) -> None:
        if item == ("stuck", 0):
            await release.wait()
        served.append(item)
        if sum(1 for key, _ in served if key != "stuck") == 100:
            others_done.set()
        if len(served) == 102:
            all_done.set()

    lanes: Lanes[tuple[str, int]] = Lanes(serve, workers=2, name="blocked")
    lanes.put("stuck", ("stuck", 0))
    lanes.put("stuck", ("stuck", 1))
    for k in range(100):
        lanes.put(f"k{k}", (f"k{k}", 0))
    await _all_done(others_done)

    assert not [item for item in served if item[0] == "stuck"]
    release.set()
    await _all_done(all_done)
    assert [item for item in served if item[0] == "stuck"] == [("stuck", 0), ("stuck", 1)]


async def test_worker_tasks_stay_bounded_under_ten_thousand_distinct_keys() -> None:
    workers = 8
    before = len(asyncio.all_tasks())
    most_tasks = 0
    count = 0
    done = asyncio.Event()

    async def serve(_item: int) -> None:
        nonlocal most_tasks, count
        await asyncio.sleep(0)
        most_tasks = max(most_tasks, len(asyncio.all_tasks()))
        count += 1
        if count == 10_000:
            done.set()

    lanes: Lanes[int] = Lanes(serve, workers=workers, name="bounded")
    for i in range(10_000):
        lanes.put(f"key-{i}", i)
    assert len(lanes.tasks()) == workers
    await _all_done(done)

    assert most_tasks == before + workers
    assert await lanes.join(5)
    assert lanes.tasks() == set()  # an idle pool holds no task


async def test_a_failing_item_blocks_its_key_and_nothing_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    served: list[tuple[str, int]] = []

    async def serve(item: tuple[str, int]) -> None:
        if item == ("bad", 0):
            raise RuntimeError("boom")
        served.append(item)

    lanes: Lanes[tuple[str, int]] = Lanes(serve, workers=1, name="failing")
    with caplog.at_level(logging.ERROR, logger="aigc_hub.runtime.lanes"):
        lanes.put("bad", ("bad", 0))
        lanes.put("bad", ("bad", 1))
        lanes.put("good", ("good", 0))
        assert await lanes.join(5)
        lanes.put("bad", ("bad", 2))  # still behind the failed item
        lanes.put("good", ("good", 1))
        assert await lanes.join(5)

    assert served == [("good", 0), ("good", 1)]
    assert lanes.pending() == 3
    assert "lane 'bad' of failing failed" in caplog.text


async def test_halt_keeps_the_item_being_served_and_starts_nothing() -> None:
    entered = asyncio.Event()
    halt_now = asyncio.Event()
    served: list[int] = []

    async def serve(item: int) -> None:
        if item == 0:
            entered.set()
            await halt_now.wait()
            lanes.halt()
        served.append(item)

    lanes: Lanes[int] = Lanes(serve, workers=1, name="halt")

    lanes.put("a", 0)
    lanes.put("a", 1)
    lanes.put("b", 2)
    await _all_done(entered)
    halt_now.set()
    assert await lanes.join(5)
    lanes.put("c", 3)

    assert served == [0]
    assert lanes.pending() == 4  # the one served when halted, the two queued, the new one
    assert lanes.tasks() == set()
