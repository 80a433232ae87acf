"""``aigc-hub avcc nodes`` and ``aigc-hub avcc playback`` against a real API: register a node,
send a JSON Lines file as it, read the stats and anomalies; and the one-line errors of a
refused batch, a line that is not JSON, a tenant key on an admin command and a revoked node."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from aigc_hub.cli.main import app as cli
from aigc_hub.tenancy import create_tenant
from tests.integration.test_avcc_cli import printed_json
from tests.support.avcc import avcc_stack, coded_work
from tests.support.hubs import make_broker, wait_until


def line(code: str, kind: str = "play", **payload: Any) -> str:
    event = {
        "event_id": str(uuid.uuid4()),
        "timestamp": int(time.time() * 1000) - 60_000,
        "payload": {
            "avcc_code": code,
            "platform_node": "8361",
            "user_hash": "sha256:cli",
            "event_type": kind,
            "duration_sec": 30,
            "revenue_cny": 0.0,
        }
        | payload,
    }
    return json.dumps(event)


async def test_nodes_and_playback_commands_and_their_errors(
    sqlite_url: str, tmp_path: Path
) -> None:
    runner = CliRunner()
    async with avcc_stack(
        sqlite_url, make_broker("embedded", tmp_path), tmp_path, groups=["avcc-sink"], scan=False
    ) as stack:
        tenant, tenant_key = await create_tenant(stack.hub.engine, "studio")
        code = await coded_work(stack.hub, tenant.id)
        admin = ["--url", stack.api_url, "--api-key", await stack.admin()]

        def run(*args: str) -> Any:
            # In a thread: the CLI's blocking HTTP calls reach the API on this event loop.
            return asyncio.to_thread(runner.invoke, cli, ["avcc", *args])

        added = await run("nodes", "add", "8361", "--name", "site A", *admin)
        assert added.exit_code == 0, added.output
        node_key = printed_json(added.stdout)["key"]
        assert isinstance(node_key, str) and node_key.startswith("avn_")
        as_node = ["--url", stack.api_url, "--node-key", node_key]

        good = tmp_path / "plays.jsonl"
        good.write_text("\n".join([line(code)] * 5 + ["", line(code, "complete")]) + "\n")
        sent = await run("playback", "send", str(good), "--batch", "4", *as_node)
        assert sent.exit_code == 0, sent.output
        assert printed_json(sent.stdout) == {"accepted": 6, "purchases": 0}

        # The second batch (lines 3-4) holds a play with revenue: refused, the first was taken.
        bad = tmp_path / "bad.jsonl"
        bad.write_text("\n".join([line(code), line(code), line(code, revenue_cny=1.0)]) + "\n")
        refused = await run("playback", "send", str(bad), "--batch", "2", *as_node)
        assert refused.exit_code == 2, refused.output
        assert "only a purchase carries revenue" in refused.stderr
        where = "the batch from line 3 was not taken; the 2 event(s) before it were"
        assert where in refused.stderr

        broken = tmp_path / "broken.jsonl"
        broken.write_text(line(code) + "\n{not json\n")
        not_json = await run("playback", "send", str(broken), *as_node)
        assert not_json.exit_code == 1 and f"{broken}:2: not JSON" in not_json.stderr

        store = await stack.avcc.analytics()

        async def stored() -> bool:
            return (await store.totals()).events == 8

        await wait_until(stored, timeout=60)
        stats = await run("playback", "stats", *admin)
        assert stats.exit_code == 0, stats.output
        summary = printed_json(stats.stdout)
        assert summary["totals"]["events"] == 8  # type: ignore[index]
        assert summary["sink"]["lag"] == 0  # type: ignore[index]
        anomalies = await run("playback", "anomalies", "--kind", "flood", *admin)
        assert anomalies.exit_code == 0 and printed_json(anomalies.stdout) == {"anomalies": []}

        as_tenant = await run("nodes", "list", "--url", stack.api_url, "--api-key", tenant_key)
        assert as_tenant.exit_code == 2 and "admin key" in as_tenant.stderr
        listed = await run("nodes", "list", *admin)
        assert [n["code"] for n in printed_json(listed.stdout)["nodes"]] == ["8361"]  # type: ignore[attr-defined]
        revoked = await run("nodes", "revoke", "8361", *admin)
        assert revoked.exit_code == 0 and "node 8361 revoked" in revoked.stdout
        unknown = await run("nodes", "revoke", "4040", *admin)
        assert unknown.exit_code == 3
