"""Issued codes on real parts: the code travels inside the image and the MP4 as a C2PA
manifest that verifies with the c2pa library (and fails once a byte of the media changes),
the public answer reveals nothing private, and `aigc-hub avcc verify` checks a proof offline,
refusing another log's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from aigc_hub.cli.main import app as cli
from aigc_hub.pipelines.avcc import provenance, tree_heads
from tests.integration.media_clips import make_clip
from tests.support.avcc import AvccStack, apply, avcc_stack, noise_png, wait_status
from tests.support.hubs import make_broker


async def signed_copy(stack: AvccStack, client: httpx.AsyncClient, record_id: int) -> bytes:
    """The coded work with its manifest, fetched as a tenant would (once it is embedded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        answer = await client.get(f"/v1/avcc/applications/{record_id}/signed-work")
        if answer.status_code == 200:
            break
        assert answer.status_code == 404 and loop.time() < deadline, answer.text
        await asyncio.sleep(0.1)
    url = answer.json()["url"]
    async with httpx.AsyncClient(base_url=stack.api_url, trust_env=False) as anyone:
        got = await anyone.get(url)
    assert got.status_code == 200
    return got.content


def flip_middle_byte(data: bytes) -> bytes:
    """The same file with one media byte changed (the middle of an image's pixel data or of
    an MP4's mdat: the manifest sits at the head of the file)."""
    at = len(data) * 3 // 4
    return data[:at] + bytes([data[at] ^ 0x55]) + data[at + 1 :]


async def test_the_code_travels_inside_the_image_and_the_mp4_and_verifies(
    sqlite_url: str, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", size="64x48", rate=10, seconds=1, audio=False)
    async with avcc_stack(sqlite_url, make_broker("embedded", tmp_path), tmp_path) as stack:
        async with stack.client(await stack.tenant("studio")) as client:
            works = {
                "image/png": (noise_png(3), "work.png"),
                "video/mp4": (clip.read_bytes(), "clip.mp4"),
            }
            ids = {
                mime: (await apply(client, data, filename=name)).json()["avcc_record_id"]
                for mime, (data, name) in works.items()
            }
            coded = {mime: await wait_status(client, i, "CODED") for mime, i in ids.items()}
            copies = {mime: await signed_copy(stack, client, i) for mime, i in ids.items()}
        async with stack.client() as anyone:
            anchor = (await anyone.get("/v1/avcc/c2pa/trust-anchor")).content
    for mime, signed in copies.items():
        path = tmp_path / f"signed-{mime.replace('/', '.')}"
        path.write_bytes(signed)
        report = provenance.read(path, mime, anchor)
        assert report.valid and report.trusted, report.reason
        assert report.claim is not None
        assert report.claim.avcc_code == coded[mime]["avcc_code"]
        assert report.claim.final_level == coded[mime]["final_level"]
        assert report.claim.content_hash == coded[mime]["content_hash"]
        assert report.claim.chain.tx_hash == coded[mime]["chain"]["tx_hash"]
        path.write_bytes(flip_middle_byte(signed))
        broken = provenance.read(path, mime, anchor)
        assert not broken.valid
        assert any(f.code.endswith("Hash.mismatch") for f in broken.failures), broken.failures


async def test_the_public_answer_and_an_offline_check_of_the_proof(
    sqlite_url: str, tmp_path: Path
) -> None:
    work = noise_png(11)
    async with avcc_stack(sqlite_url, make_broker("embedded", tmp_path), tmp_path) as stack:
        async with stack.client(await stack.tenant("studio")) as client:
            record_id = (await apply(client, work)).json()["avcc_record_id"]
            code = (await wait_status(client, record_id, "CODED"))["avcc_code"]
        async with stack.client() as anyone:
            public = (await anyone.get(f"/v1/avcc/codes/{code}")).json()
            key_pem = (await anyone.get("/v1/avcc/log/public-key")).content
            mistyped = await anyone.get(f"/v1/avcc/codes/{code[:-1]}0")
            unknown = await anyone.get("/v1/avcc/codes/MA.156.10005.8361/000000ZZ" + "Q")
    text = json.dumps(public)
    assert public["avcc_code"] == code and public["status"] == "valid"
    for private in ("tenant", "object_key", "content_url", "blob:", "t/"):
        assert private not in text, private
    assert mistyped.status_code == 422
    assert unknown.status_code in (404, 422)

    proof, key, other, original = (tmp_path / n for n in ("p.json", "k.pem", "o.pem", "w.png"))
    proof.write_text(json.dumps(public["proof"]))
    key.write_bytes(key_pem)
    other.write_bytes(tree_heads.public_key_pem(Ed25519PrivateKey.generate().public_key()))
    original.write_bytes(work)
    runner = CliRunner()
    base = ["avcc", "verify", code, "--proof", str(proof)]
    ok = runner.invoke(cli, [*base, "--public-key", str(key), "--work", str(original)])
    another_log = runner.invoke(cli, [*base, "--public-key", str(other)])
    elsewhere = "MA.156.10005.8361/000000010"
    other_code = runner.invoke(
        cli, ["avcc", "verify", elsewhere, "--proof", str(proof), "--public-key", str(key)]
    )
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["verified"] is True
    assert json.loads(ok.stdout)["work_checked"] is True
    assert another_log.exit_code == 1
    assert "not verified" in another_log.stderr and "log" in another_log.stderr
    assert other_code.exit_code != 0
