"""``aigc-hub vistack``: videos from the command line, through the HTTP API, and the
transcoder service.

``upload`` (an upload in parts straight to the object store, then the video; ``--wait``
follows it), ``wait``, ``get``, ``list``, ``delete``; ``transcoder serve`` runs the gRPC
transcoder the workers call.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from aigc_hub.cli import kit
from aigc_hub.cli.kit import ApiKey, ApiUrl

from .transcoder.cli import app as transcoder_app

app = kit.new_app("vistack", "Vistack (seed 002): upload, wait, get, list, delete; transcoder.")
app.add_typer(transcoder_app, name="transcoder")

#: The ends of a video's transcode.
ENDED = ("published", "failed")


@app.command()
def upload(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="The video file.")],
    title: Annotated[str, typer.Option(help="The video's title (1-200 characters).")],
    wait: Annotated[bool, typer.Option(help="Follow the transcode until it ends.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds --wait waits at most.")] = 1800,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Upload FILE in parts (straight to the object store) and create its video; prints it
    (pending)."""
    size = file.stat().st_size
    if size == 0:
        kit.fail(f"{file.name} is empty: choose the video file itself", kit.ExitCode.USAGE)
    started = kit.call_api("POST", url, "/vistack/uploads", api_key, json={"size_bytes": size})
    upload_id, plan = started["upload_id"], started["upload"]
    parts = [_put_part(url, file, plan["part_size"], part) for part in plan["parts"]]
    done = kit.call_api(
        "POST", url, f"/vistack/uploads/{upload_id}/complete", api_key, json={"parts": parts}
    )
    if done["status"] != "uploaded":
        kit.fail(f"{file.name} was refused: {done.get('reason')}", kit.ExitCode.USAGE)
    video = kit.call_api(
        "POST",
        url,
        "/vistack/videos",
        api_key,
        json={"upload_id": upload_id, "title": title},
        # A retry of this very command must not make the video twice.
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    if not wait:
        kit.show_json(video)
        return
    _follow(url, api_key, video["video_id"], timeout)


def _put_part(url: str, file: Path, part_size: int, part: dict[str, Any]) -> dict[str, Any]:
    """PUT one part's bytes (read from the file per part: never the whole file in memory)."""
    target = part["url"] if "://" in part["url"] else url.rstrip("/") + part["url"]
    with file.open("rb") as body:
        body.seek((part["part_no"] - 1) * part_size)
        data = body.read(part_size)
    try:
        answer = httpx.put(target, content=data, headers=part["headers"], timeout=300)
    except httpx.HTTPError as exc:
        kit.fail(f"uploading {file.name} failed: {exc}; try again")
    if answer.status_code >= 300:
        kit.fail(f"the object store refused the upload ({answer.status_code}): {answer.text[:200]}")
    return {"part_no": part["part_no"], "etag": answer.headers.get("etag", "").strip('"')}


@app.command("wait")
def wait_for(
    video_id: Annotated[str, typer.Argument(help="The video (vid_…).")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait at most.")] = 1800,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Wait until the video is published or failed; prints it."""
    _follow(url, api_key, video_id, timeout)


def _follow(url: str, api_key: str, video_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    video: dict[str, Any] = {}
    while time.monotonic() < deadline:
        video = kit.call_api("GET", url, f"/vistack/videos/{video_id}", api_key)
        if video["status"] in ENDED:
            kit.show_json(video)
            if video["status"] == "failed":
                kit.fail(f"video {video_id} failed: {video.get('error_message')}")
            return
        time.sleep(1.0)
    kit.fail(f"video {video_id} is still {video.get('status')} after {timeout:.0f} s")


@app.command()
def get(
    video_id: Annotated[str, typer.Argument(help="The video (vid_…).")],
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """A video: status, attempts, and once published its manifest and cover URLs."""
    kit.show_json(kit.call_api("GET", url, f"/vistack/videos/{video_id}", api_key))


@app.command("list")
def list_videos(
    status: Annotated[
        str | None, typer.Option(help="pending, processing, published or failed.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="How many, newest first.")] = 50,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Your videos, newest first."""
    params: dict[str, Any] = {"limit": limit}
    if status is not None:
        params["status"] = status
    kit.show_json(kit.call_api("GET", url, "/vistack/videos", api_key, params=params))


@app.command()
def delete(
    video_id: Annotated[str, typer.Argument(help="The video (vid_…).")],
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Delete a video: its files, then its rows, danmaku and comments (asynchronously)."""
    kit.call_api("DELETE", url, f"/vistack/videos/{video_id}", api_key)
    kit.console().print(f"deleting {video_id}")
