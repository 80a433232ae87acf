"""``aigc-hub avcc``: content codes from the command line.

The twins of ``/v1/avcc``: ``apply`` (upload a file and apply; ``--wait`` for the outcome),
``get``, ``codes`` (the public answer for a code), ``review`` (the human queue: ``list``,
``claim``, ``decide``), and ``verify``, which checks a code's proof **offline**: only the
proof file and the log's public key, no hub.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import time
import uuid
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urljoin

import httpx
import typer

from aigc_hub.cli import kit
from aigc_hub.cli.kit import ApiKey as ApiKey
from aigc_hub.cli.kit import ApiUrl as ApiUrl

app = kit.new_app("avcc", "Content codes: apply, get, codes, review, verify (offline), settlement.")
review_app = kit.new_app("review", "The human review queue (admin key): list, claim, decide.")
app.add_typer(review_app, name="review")

DEFAULT_URL: str = kit.DEFAULT_API_URL
_call = kit.call_api


def _put(api_url: str, upload: dict[str, Any], data: bytes) -> None:
    """The signed upload: the bytes go straight to the store, not through the API (a local
    store's URLs are the hub's own, relative to its API)."""
    target = urljoin(api_url.rstrip("/") + "/", upload["url"])
    try:
        answer = httpx.put(target, content=data, headers=upload["headers"], timeout=600)
    except httpx.HTTPError as exc:
        kit.fail(f"cannot upload the work ({exc})", kit.ExitCode.UNAVAILABLE)
    if answer.status_code >= 300:
        kit.fail(f"the store refused the upload: {answer.status_code} {answer.text[:200]}")


_show = kit.show_json


@app.command()
def apply(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="The work.")],
    model_name: Annotated[str, typer.Option(help="The AI tool that made it.")],
    model_version: Annotated[str, typer.Option(help="Its version.")],
    priority: Annotated[int, typer.Option(min=1, max=9)] = 5,
    wait: Annotated[float, typer.Option(help="Seconds to wait for the outcome (0: none).")] = 0,
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
) -> None:
    """Upload FILE and apply for its code (prints the application)."""
    data = file.read_bytes()
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    content_type = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    new_work = {
        "filename": file.name,
        "content_type": content_type,
        "size_bytes": len(data),
        "content_hash": digest,
    }
    work = _call("POST", url, "/avcc/works", api_key, json=new_work)
    _put(url, work["upload"], data)
    body = {
        "content_url": work["content_url"],
        "content_hash": digest,
        "ai_tool_info": {"model_name": model_name, "model_version": model_version},
        "priority": priority,
    }
    record = _call(
        "POST",
        url,
        "/avcc/applications",
        api_key,
        json=body,
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    deadline = time.monotonic() + wait
    # Polling is the CLI's way to wait: the answer is a snapshot the API serves anyway.
    while (
        record["status"] not in {"CODED", "REJECTED", "NEED_HUMAN"} and time.monotonic() < deadline
    ):
        time.sleep(0.2)
        record = _call("GET", url, f"/avcc/applications/{record['avcc_record_id']}", api_key)
    _show(record)


@app.command()
def get(
    record_id: Annotated[int, typer.Argument(help="The avcc_record_id.")],
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
) -> None:
    """One application of yours."""
    _show(_call("GET", url, f"/avcc/applications/{record_id}", api_key))


@app.command()
def codes(
    code: Annotated[str, typer.Argument(help="An AVCC code, e.g. MA.156.10005.8361/0000002QJ")],
    save_proof: Annotated[
        Path | None, typer.Option(help="Write the code's proof to this file (for `verify`).")
    ] = None,
    url: ApiUrl = DEFAULT_URL,
) -> None:
    """The public answer for a code (no key needed)."""
    answer = _call("GET", url, f"/avcc/codes/{code}")
    if save_proof is not None:
        save_proof.write_text(json.dumps(answer["proof"]))
    _show(answer)


@app.command()
def verify(
    code: Annotated[str, typer.Argument(help="The AVCC code to check.")],
    proof: Annotated[
        Path, typer.Option(exists=True, dir_okay=False, help="The code's proof (JSON).")
    ],
    public_key: Annotated[
        Path,
        typer.Option(exists=True, dir_okay=False, help="The log's public key (PEM)."),
    ],
    work: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="The original work, to check its hash."),
    ] = None,
) -> None:
    """Check CODE offline, from its proof and the log's public key (no hub needed).

    Checks the code's check character, that the proof's statement is this code's work, the
    log's signature over its tree head and the inclusion proof; with --work, the work's hash.
    """
    from .verification import ProofRefused, verify_offline  # the CLI's only heavy import

    try:
        checked = verify_offline(
            code,
            proof.read_bytes(),
            public_key.read_bytes(),
            work.read_bytes() if work is not None else None,
        )
    except ProofRefused as exc:
        kit.fail(f"not verified: {exc}", kit.ExitCode.FAILURE)
    _show(checked)


@review_app.command("list")
def review_list(url: ApiUrl = DEFAULT_URL, api_key: ApiKey = "") -> None:
    """Works waiting for a human decision."""
    _show(_call("GET", url, "/avcc/reviews", api_key))


@review_app.command()
def claim(
    record_id: Annotated[int, typer.Argument()], url: ApiUrl = DEFAULT_URL, api_key: ApiKey = ""
) -> None:
    """Claim a work (prints the claim token decide needs)."""
    _show(_call("POST", url, f"/avcc/reviews/{record_id}/claim", api_key))


@review_app.command()
def decide(
    record_id: Annotated[int, typer.Argument()],
    claim_token: Annotated[str, typer.Option(help="From `claim`.")],
    decision: Annotated[str, typer.Option(help="approved or rejected")],
    level: Annotated[str | None, typer.Option(help="P, G or O (approvals only)")] = None,
    note: Annotated[str, typer.Option()] = "",
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
) -> None:
    """Decide a claimed work."""
    body = {"claim_token": claim_token, "decision": decision, "final_level": level, "note": note}
    _show(_call("POST", url, f"/avcc/reviews/{record_id}/decision", api_key, json=body))


# Platform nodes, playback reports and settlement live in their own modules; they reuse the
# API helpers above, so they are mounted last.
call_api, show = _call, _show
from . import settlement_cli  # noqa: E402
from .playback_cli import nodes_app, playback_app  # noqa: E402

app.add_typer(nodes_app, name="nodes")
app.add_typer(playback_app, name="playback")
app.add_typer(settlement_cli.app, name="settlement")
