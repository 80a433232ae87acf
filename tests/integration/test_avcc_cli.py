"""``aigc-hub avcc`` against a real API: apply a file and wait for its code, read it back,
and the one-line errors of an unknown application, a refused file and an unreachable hub."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from aigc_hub.cli.main import app as cli
from tests.support.avcc import avcc_stack, noise_png
from tests.support.hubs import make_broker


def printed_json(out: str) -> dict[str, object]:
    """The JSON object a command printed (the hub runs in this process: its log lines go to
    the same captured stdout)."""
    lines = out.splitlines()
    start, end = lines.index("{"), len(lines) - lines[::-1].index("}")
    value: dict[str, object] = json.loads("\n".join(lines[start:end]))
    return value


async def test_apply_get_and_the_errors_of_the_avcc_commands(
    sqlite_url: str, tmp_path: Path
) -> None:
    work, junk = tmp_path / "work.png", tmp_path / "junk.bin"
    work.write_bytes(noise_png(77))
    junk.write_bytes(b"\x00\x01 not a work")
    runner = CliRunner()
    async with avcc_stack(sqlite_url, make_broker("embedded", tmp_path), tmp_path) as stack:
        key = await stack.tenant("studio")
        common = ["--url", stack.api_url, "--api-key", key]
        tool = ["--model-name", "Stable-Diffusion-XL", "--model-version", "v1.0"]

        def run(*args: str) -> object:
            # In a thread: the CLI's blocking HTTP calls reach the API on this event loop.
            return asyncio.to_thread(runner.invoke, cli, ["avcc", *args])

        applied = await run("apply", str(work), *tool, "--wait", "60", *common)
        assert applied.exit_code == 0, applied.output  # type: ignore[attr-defined]
        record = printed_json(applied.stdout)  # type: ignore[attr-defined]
        got = await run("get", str(record["avcc_record_id"]), *common)
        unknown = await run("get", "999999", *common)
        refused = await run("apply", str(junk), *tool, *common)
    down = runner.invoke(cli, ["avcc", "get", "1", "--url", "http://127.0.0.1:9", "--api-key", "k"])
    assert applied.exit_code == 0, applied.output  # type: ignore[attr-defined]
    assert record["status"] == "CODED" and record["avcc_code"].startswith("MA.156.10005.8361/")
    assert printed_json(got.stdout)["avcc_code"] == record["avcc_code"]  # type: ignore[attr-defined]
    assert unknown.exit_code == 3  # type: ignore[attr-defined]
    assert unknown.stderr.strip().count("\n") == 0  # type: ignore[attr-defined]
    assert refused.exit_code == 2 and "content_url" in refused.stderr  # type: ignore[attr-defined]
    assert down.exit_code == 5 and "cannot reach the hub" in down.stderr
