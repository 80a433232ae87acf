"""`aigc-hub up` on embedded defaults generates real videos: 3 tenants submit 50 tasks through
the Python client; every task SUCCEEDS with exactly one RESERVE and one SETTLE, and every
output is a valid MP4 (the issue's must-show, end to end through the real processes)."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from aigc_hub.client import AsyncHubClient
from aigc_hub.store.migrate import sync_url
from tests.support import up
from tests.support.provider import ffprobe
from tests.support.up import PROFILES, cli, profile_env

TASKS = 50


@pytest.fixture(params=PROFILES)
def hub_up(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    # 50 tasks here: one cheap variant each (the whole media stage has its own test,
    # test_media_plane_up.py, on both profiles).
    profile = profile_env(request, tmp_path)
    with up.hub_up(profile, tmp_path, AIGC_HUB_GEN_MEDIA_PROFILES="poster") as (url, env, out):
        yield url, env
    assert "local provider on" in out[0], out[0]


def _tenant(env: dict[str, str], cwd: Path, name: str) -> str:
    out = cli(env, cwd, "tenants", "create", name)
    tenant_id = re.search(r"tenant id:\s+(\S+)", out)
    key = re.search(r"api key:\s+(\S+)", out)
    assert tenant_id and key, out
    cli(env, cwd, "gen", "grant", tenant_id.group(1), "100000", "--grant-id", f"start-{name}")
    return key.group(1)


async def _run_tenant(url: str, key: str, count: int) -> list[str]:
    async with AsyncHubClient(url, api_key=key) as client:
        created = [
            await client.create_task(
                model="local-v1", prompt=f"纸船 {n}", duration_s=1, resolution="160x90"
            )
            for n in range(count)
        ]
        finished = await asyncio.gather(*(client.wait(t.task_id, timeout=180) for t in created))
    outcomes = Counter((t.status, t.failure_class, t.failure_code) for t in finished)
    assert {t.status for t in finished} == {"SUCCEEDED"}, outcomes
    return [t.task_id for t in finished]


def test_up_generates_fifty_videos_for_three_tenants(
    hub_up: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, env = hub_up
    keys = [_tenant(env, tmp_path, name) for name in ("acme", "globex", "initech")]

    async def all_tenants() -> list[list[str]]:
        return await asyncio.gather(
            *(_run_tenant(url, key, n) for key, n in zip(keys, (17, 17, 16), strict=True))
        )

    ids = [task for tenant in asyncio.run(all_tenants()) for task in tenant]
    assert len(ids) == TASKS

    # the CLI twin reads the same facts
    shown = json.loads(
        cli(
            {**env, "AIGC_HUB_API_KEY": keys[0], "AIGC_HUB_API_URL": url},
            tmp_path,
            "gen",
            "wait",
            ids[0],
            "--json",
        )
    )
    assert shown["status"] == "SUCCEEDED"

    engine = sa.create_engine(sync_url(env["AIGC_HUB_DATABASE_URL"]))
    db = engine.connect()
    ledger = db.execute(
        sa.text(
            "SELECT task_id, type, count(*) FROM credit_ledger WHERE task_id IS NOT NULL "
            "GROUP BY task_id, type"
        )
    ).all()
    per_task: dict[str, dict[str, int]] = {}
    for task_id, kind, n in ledger:
        per_task.setdefault(task_id, {})[kind] = n
    assert {t: per_task.get(t) for t in ids} == {t: {"RESERVE": 1, "SETTLE": 1} for t in ids}
    keys_of = {
        r.task_id: r.object_key
        for r in db.execute(
            sa.text("SELECT task_id, object_key FROM assets WHERE variant_profile = 'source'")
        ).all()
    }
    db.close()
    engine.dispose()
    for task_id in ids:
        info = ffprobe(tmp_path / "var" / "blobs" / "objects" / keys_of[task_id])
        assert (info["codec_name"], info["width"], info["height"]) == ("h264", 160, 90)
