"""``aigc-hub avcc settlement``: a tenant's statement, the periods (admin key), and
``verify-line``, which checks a line's proof **offline** (the proof file, and the log's public
key to check the batch's chain receipt too; no hub)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from aigc_hub.cli import kit

from . import cli as avcc_cli

app = kit.new_app("settlement", "Settlement: statement, periods (admin), verify-line (offline).")


@app.command()
def statement(
    period: Annotated[str, typer.Argument(help="A period id, e.g. 20261201T0000Z.")],
    save_proof_of: Annotated[
        int | None, typer.Option(help="Also save this line's proof (to --proof-file).")
    ] = None,
    proof_file: Annotated[Path, typer.Option(help="Where --save-proof-of writes.")] = Path(
        "line-proof.json"
    ),
    url: avcc_cli.ApiUrl = avcc_cli.DEFAULT_URL,
    api_key: avcc_cli.ApiKey = "",
) -> None:
    """Your statement for PERIOD: your lines, their count and total, the batch's chain fields."""
    answer = avcc_cli.call_api("GET", url, f"/avcc/settlements/{period}", api_key)
    if save_proof_of is not None:
        proof = avcc_cli.call_api(
            "GET", url, f"/avcc/settlements/{period}/lines/{save_proof_of}/proof", api_key
        )
        proof_file.write_text(json.dumps(proof))
    avcc_cli.show(answer)


@app.command()
def periods(url: avcc_cli.ApiUrl = avcc_cli.DEFAULT_URL, api_key: avcc_cli.ApiKey = "") -> None:
    """The settlement periods, newest first (admin key)."""
    avcc_cli.show(avcc_cli.call_api("GET", url, "/avcc/admin/settlement-periods", api_key))


@app.command("verify-line")
def verify_line(
    proof: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="The line's proof (JSON).")
    ],
    public_key: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, help="The log's public key (PEM): check the chain too."
        ),
    ] = None,
) -> None:
    """Check a settlement line offline: in its batch's lines root, named by the statement,
    and (with --public-key) the statement notarized on the log."""
    from .settlement_proofs import LineProofRefused
    from .settlement_proofs import verify_line as check

    try:
        checked = check(
            proof.read_bytes(), public_key.read_bytes() if public_key is not None else None
        )
    except LineProofRefused as exc:
        kit.fail(f"not verified: {exc}", kit.ExitCode.FAILURE)
    avcc_cli.show(checked)
