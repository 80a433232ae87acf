"""avcc end to end on embedded defaults: SQLite, the embedded log, local blobs, a real API;
applications reviewed, notarized on the verifiable log and coded."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from aigc_hub.pipelines.avcc.models import avcc_log_leaves, avcc_record_events
from tests.support.avcc import apply, avcc_stack, noise_png, wait_settled
from tests.support.hubs import make_broker

FLOW = ["APPLIED", "APPROVED", "ANCHORING", "ANCHORED", "CODED"]


async def test_works_of_three_tenants_are_coded_once_each_with_their_events_in_order(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with avcc_stack(sqlite_url, make_broker("embedded", tmp_path), tmp_path) as stack:
        ids: list[int] = []
        for t in range(3):
            async with stack.client(await stack.tenant(f"studio-{t}")) as client:
                for i in range(4):
                    answer = await apply(client, noise_png(t * 100 + i))
                    assert answer.status_code == 201, answer.text
                    ids.append(answer.json()["avcc_record_id"])
                settled = await wait_settled(client, ids[-4:])
        records = {r["id"]: r for r in await stack.records()}
        async with stack.hub.engine.connect() as conn:
            leaves = (await conn.execute(sa.select(avcc_log_leaves.c.entry_key))).scalars().all()
            moves = (
                await conn.execute(sa.select(avcc_record_events).order_by(avcc_record_events.c.id))
            ).all()
    assert {s["status"] for s in settled.values()} == {"CODED"}
    codes = [records[i]["avcc_code"] for i in ids]
    assert len(set(codes)) == len(ids) and None not in codes
    assert sorted(leaves) == sorted(f"copyright_main:{i}" for i in ids)
    assert all(records[i]["report_hash"].startswith("sha256:") for i in ids)
    for record_id in ids:
        mine = [m for m in moves if m.record_id == record_id]
        assert [m.to_status for m in mine] == FLOW
        assert [m.status_version for m in mine] == list(range(len(FLOW)))
