"""The generation pipeline driven by the fake provider: no media tools, no network, no sleeps."""

from __future__ import annotations

from pathlib import Path

from tests.support.fake_generation import fake_generation


async def test_an_accepted_job_is_polled_to_success_and_its_output_kept(
    db_url: str, tmp_path: Path
) -> None:
    async with fake_generation(db_url, tmp_path) as g:
        task_id = await g.create("a paper boat")
        await g.settle()
        assert await g.status(task_id) == "SUBMITTED"
        await g.advance(2)
        assert await g.scan("generation-polls") == ["poll_requested"]
        await g.settle()
        assert await g.status(task_id) == "RUNNING"
        await g.advance(5)
        assert await g.scan("generation-polls") == ["poll_requested"]
        await g.settle()
        assert await g.path(task_id) == [
            "QUEUED", "DISPATCHING", "SUBMITTED", "RUNNING", "OUTPUT_FETCHING",
            "POST_PROCESSING", "SUCCEEDED",
        ]  # fmt: skip
