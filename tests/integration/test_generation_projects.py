"""Projects and their timeline revisions, through the API on SQLite and PostgreSQL: revisions
numbered and immutable, a stale save refused with 409 (two editors from one revision: one
wins), a timeline that references another tenant's asset or an asset not READY refused, a
timeline that breaks its own rules refused with the element named, and the timeline's schema
in the OpenAPI document. And ``aigc-hub gen project`` doing the same from a shell."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from aigc_hub import tenancy
from aigc_hub.cli.main import app as cli
from aigc_hub.core import ids
from aigc_hub.pipelines.generation.models import assets
from aigc_hub.pipelines.generation.timeline import TimelineV1
from tests.integration.test_avcc_cli import printed_json
from tests.support.uploads import AssetStack, asset_stack


async def _asset(stack: AssetStack, key: str, *, status: str = "READY") -> str:
    """An asset row of the key's tenant (the bytes do not matter to a timeline)."""
    who = await tenancy.authenticate(stack.hub.engine, key)
    assert who is not None and who.tenant_id is not None
    tenant_id, asset_id = who.tenant_id, ids.new_id_str()
    async with stack.hub.transaction() as conn:
        await conn.execute(
            assets.insert().values(
                id=asset_id,
                tenant_id=tenant_id,
                kind="upload",
                object_bucket="hub",
                object_key=f"t/{tenant_id}/asset/{asset_id}/clip.mp4",
                content_type="video/mp4",
                status=status,
                duration_ms=10_000,
                created_at=stack.hub.clock.now_ms(),
            )
        )
    return asset_id


def _timeline(clips: list[str], music: str, title: str = "Holiday") -> dict[str, Any]:
    """Three clips with a crossfade, a title and background music: 13 s at 1280x720, 25 fps."""
    return {
        "schema_version": 1,
        "output": {"width": 1280, "height": 720, "frame_rate": 25, "duration_ms": 13_000},
        "tracks": [
            {
                "id": "video",
                "clips": [
                    {"id": "a", "asset_id": clips[0], "at_ms": 0, "in_ms": 0, "out_ms": 5000},
                    {
                        "id": "b",
                        "asset_id": clips[1],
                        "at_ms": 4000,
                        "in_ms": 1000,
                        "out_ms": 6000,
                        "transition_in": {"kind": "crossfade", "duration_ms": 1000},
                    },
                    {"id": "c", "asset_id": clips[2], "at_ms": 9000, "in_ms": 0, "out_ms": 4000},
                ],
            }
        ],
        "texts": [{"id": "title", "text": title, "start_ms": 0, "end_ms": 3000, "y": 0.8}],
        "audio": [
            {
                "id": "music",
                "asset_id": music,
                "at_ms": 0,
                "in_ms": 0,
                "out_ms": 13_000,
                "gain_db": -6,
                "fade_out_ms": 2000,
            }
        ],
    }


async def test_revisions_are_numbered_immutable_and_saved_over_the_head_only(
    db_url: str, tmp_path: Path
) -> None:
    async with asset_stack(db_url, tmp_path) as stack:
        key = await stack.tenant("studio")
        clips = [await _asset(stack, key) for _ in range(3)]
        music = await _asset(stack, key)
        async with stack.client(key) as api:
            created = await api.post(
                "/v1/projects", json={"name": "Holiday", "timeline": _timeline(clips, music)}
            )
            assert created.status_code == 201, created.text
            project = created.json()
            project_id = project["project_id"]
            assert project["head_revision"] == 1
            # Stored as sent, with the schema's defaults filled in.
            sent = TimelineV1.model_validate(_timeline(clips, music)).model_dump(mode="json")
            assert project["revision"]["timeline"] == sent

            retitled = _timeline(clips, music, title="Summer")
            saved = await api.post(
                f"/v1/projects/{project_id}/revisions",
                json={"base_revision": 1, "timeline": retitled},
            )
            assert saved.status_code == 201, saved.text
            assert saved.json()["number"] == 2

            # Two editors both started from revision 2: one wins, the other is told to re-read.
            first, second = (_timeline(clips, music, title=t) for t in ("One", "Two"))
            answers = await asyncio.gather(
                *(
                    api.post(
                        f"/v1/projects/{project_id}/revisions",
                        json={"base_revision": 2, "timeline": t},
                    )
                    for t in (first, second)
                )
            )
            assert sorted(a.status_code for a in answers) == [201, 409], [a.text for a in answers]
            [stale] = [a for a in answers if a.status_code == 409]
            assert stale.json()["head_revision"] == 3
            assert stale.json()["type"].endswith("stale-revision")

            # The older revisions are as they were saved.
            one = await api.get(f"/v1/projects/{project_id}/revisions/1")
            assert one.json()["timeline"]["texts"][0]["text"] == "Holiday"
            two = await api.get(f"/v1/projects/{project_id}/revisions/2")
            assert two.json()["timeline"]["texts"][0]["text"] == "Summer"
            head = (await api.get(f"/v1/projects/{project_id}")).json()
            assert head["head_revision"] == 3
            assert head["revision"]["timeline"]["texts"][0]["text"] in ("One", "Two")
            assert (await api.get(f"/v1/projects/{project_id}/revisions/4")).status_code == 404

            empty = await api.post("/v1/projects", json={"name": "Later"})
            assert empty.json()["head_revision"] == 0 and empty.json()["revision"] is None
            listed = (await api.get("/v1/projects", params={"limit": 1})).json()
            assert [p["project_id"] for p in listed["items"]] == [empty.json()["project_id"]]
            rest = await api.get("/v1/projects", params={"before": listed["next_before"]})
            assert [p["project_id"] for p in rest.json()["items"]] == [project_id]


async def test_a_timeline_of_assets_not_yours_or_not_ready_or_breaking_its_rules_is_refused(
    db_url: str, tmp_path: Path
) -> None:
    async with asset_stack(db_url, tmp_path) as stack:
        key, other = await stack.tenant("studio"), await stack.tenant("rival")
        clips = [await _asset(stack, key) for _ in range(3)]
        music = await _asset(stack, key)
        theirs = await _asset(stack, other)
        uploading = await _asset(stack, key, status="UPLOADING")
        async with stack.client(key) as api, stack.client(other) as rival:
            project_id = (await api.post("/v1/projects", json={"name": "Mine"})).json()[
                "project_id"
            ]

            async def save(timeline: dict[str, Any]) -> httpx.Response:
                return await api.post(
                    f"/v1/projects/{project_id}/revisions",
                    json={"base_revision": 0, "timeline": timeline},
                )

            foreign = await save(_timeline([clips[0], theirs, clips[2]], music))
            assert foreign.status_code == 422, foreign.text
            assert theirs in foreign.text and "unknown asset" in foreign.text
            not_ready = await save(_timeline(clips, uploading))
            assert not_ready.status_code == 422 and "not READY" in not_ready.text

            overlap = _timeline(clips, music)
            del overlap["tracks"][0]["clips"][1]["transition_in"]
            answer = await save(overlap)
            assert answer.status_code == 422 and "b: overlaps a" in answer.text
            too_long = copy.deepcopy(_timeline(clips, music))
            too_long["output"]["duration_ms"] = 12_000
            answer = await save(too_long)
            assert answer.status_code == 422 and "end after output.duration_ms" in answer.text
            twice = copy.deepcopy(_timeline(clips, music))
            twice["texts"][0]["id"] = "a"
            answer = await save(twice)
            assert answer.status_code == 422 and "unique" in answer.text
            odd = copy.deepcopy(_timeline(clips, music))
            odd["output"]["width"] = 1279
            assert (await save(odd)).status_code == 422

            # Nothing was saved by any of them.
            assert (await api.get(f"/v1/projects/{project_id}")).json()["head_revision"] == 0
            # Another tenant's project reads as none.
            assert (await rival.get(f"/v1/projects/{project_id}")).status_code == 404
            hijack = await rival.post(
                f"/v1/projects/{project_id}/revisions",
                json={"base_revision": 0, "timeline": _timeline(clips, music)},
            )
            assert hijack.status_code == 404, hijack.text

            schema = (await api.get("/v1/openapi.json")).json()["components"]["schemas"]
            assert schema["TimelineV1"]["properties"]["schema_version"]["const"] == 1
            assert "Clip" in schema and "TextOverlay" in schema and "AudioClip" in schema


async def test_the_project_commands_create_save_and_read_revisions(
    sqlite_url: str, tmp_path: Path
) -> None:
    runner = CliRunner()
    async with asset_stack(sqlite_url, tmp_path) as stack:
        key = await stack.tenant("studio")
        clips = [await _asset(stack, key) for _ in range(3)]
        music = await _asset(stack, key)
        first, second = tmp_path / "first.json", tmp_path / "second.json"
        first.write_text(json.dumps(_timeline(clips, music)))
        second.write_text(json.dumps(_timeline(clips, music, title="Summer")))
        broken = tmp_path / "broken.json"
        broken.write_text("{not json")
        common = ["--url", stack.api_url, "--api-key", key]

        def run(*args: str) -> Any:
            # In a thread: the CLI's blocking HTTP calls reach the API on this event loop.
            return asyncio.to_thread(runner.invoke, cli, ["gen", "project", *args, *common])

        made = await run("create", "Holiday", "--timeline", str(first))
        assert made.exit_code == 0, made.output
        project_id = str(printed_json(made.stdout)["project_id"])
        saved = await run("save", project_id, "--timeline", str(second), "--base", "1")
        stale = await run("save", project_id, "--timeline", str(second), "--base", "1")
        one = await run("get", project_id, "--revision", "1")
        listed = await run("list")
        bad = await run("save", project_id, "--timeline", str(broken), "--base", "2")
    assert saved.exit_code == 0, saved.output
    assert printed_json(saved.stdout)["number"] == 2
    assert stale.exit_code == 4 and "409" in stale.stderr
    assert stale.stderr.strip().count("\n") == 0
    revision = printed_json(one.stdout)
    assert revision["timeline"]["texts"][0]["text"] == "Holiday"  # type: ignore[index]
    assert project_id in listed.stdout
    assert bad.exit_code == 2 and "broken.json is not a JSON timeline" in bad.stderr
