"""The AVCC code inside the work: C2PA manifests embedded by the real c2pa library in real
JPEG, PNG and (FFmpeg-made) MP4 files, signed by a test CA, read back and checked."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import c2pa  # type: ignore[import-untyped]
import pytest
from PIL import Image

from aigc_hub.core.errors import ConfigurationError, InvalidInput
from aigc_hub.pipelines.avcc import provenance
from aigc_hub.pipelines.avcc.provenance import (
    AiTool,
    ChainRef,
    CodeClaim,
    PlatformSigner,
    Problem,
    UnreadableMedia,
    UnsupportedMedia,
)
from tests.integration.media_clips import make_clip
from tests.support.c2pa_ca import PlatformCA, make_ca

MediaMaker = Callable[[Path], Path]


def make_jpeg(directory: Path) -> Path:
    """A few-KB JPEG of noise (noise so the scan data is not trivially compressible)."""
    path = directory / "work.jpg"
    Image.effect_noise((64, 48), 40).convert("RGB").save(path, quality=85)
    return path


def make_png(directory: Path) -> Path:
    path = directory / "work.png"
    Image.effect_noise((64, 48), 40).convert("RGB").save(path)
    return path


def make_mp4(directory: Path) -> Path:
    """A 1-second tiny H.264 clip, as the media suite makes its clips."""
    return make_clip(directory / "work.mp4", size="64x48", rate=10, seconds=1, audio=False)


MEDIA = [
    pytest.param(make_jpeg, "image/jpeg", id="jpeg"),
    pytest.param(make_png, "image/png", id="png"),
    pytest.param(make_mp4, "video/mp4", id="mp4", marks=pytest.mark.ffmpeg),
]


def claim_for(path: Path) -> CodeClaim:
    return CodeClaim(
        avcc_code="AVCC-2025-0000042-P",
        final_level="P",
        avcc_record_id=42,
        content_hash="sha256:" + hashlib.sha256(path.read_bytes()).hexdigest(),
        issued_at_ms=1_750_000_000_123,
        ai_tool=AiTool(model_name="wan-video", model_version="2.1"),
        chain=ChainRef(
            chain_type="evm", tx_hash="0x" + "ab" * 32, block_height=7, crd_address="0x" + "c" * 40
        ),
        proof={"log_index": 3, "tree_size": 8, "path": ["aa", "bb"], "root": {"sig": "ed25519"}},
    )


@pytest.fixture
def ca(tmp_path: Path) -> PlatformCA:
    return make_ca(tmp_path / "ca")


@pytest.fixture
def signer(ca: PlatformCA) -> PlatformSigner:
    return PlatformSigner.from_files(ca.chain_path, ca.key_path)


def signed(
    make: MediaMaker, mime: str, tmp_path: Path, signer: PlatformSigner
) -> tuple[Path, CodeClaim]:
    """A copy of a work made by ``make``, with the AVCC manifest embedded, and its claim."""
    src = make(tmp_path)
    dst = src.with_name("signed" + src.suffix)
    claim = claim_for(src)
    provenance.embed(src, dst, mime, claim, signer)
    return dst, claim


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def jpeg_scan_byte(data: bytes) -> int:
    """An offset inside the JPEG's entropy-coded scan data (after the last SOS header), on a
    byte whose change makes no marker: the media changes, the manifest (APP11) does not."""
    sos = data.rindex(b"\xff\xda")
    header_length = int.from_bytes(data[sos + 2 : sos + 4], "big")
    start = sos + 2 + header_length + 16
    return next(i for i in range(start, len(data)) if 0xFF not in data[i - 1 : i + 2])


def png_idat_byte(data: bytes) -> int:
    """An offset inside the first IDAT chunk's compressed pixels."""
    return data.index(b"IDAT") + 4 + 16


def mp4_mdat_byte(data: bytes) -> int:
    """An offset in the middle of the MP4's ``mdat`` box (the coded frames)."""
    position = 0
    while position < len(data):
        size = int.from_bytes(data[position : position + 4], "big")
        if data[position + 4 : position + 8] == b"mdat":
            return position + 8 + (size - 8) // 2
        position += size
    raise AssertionError("no mdat box")


@pytest.mark.parametrize(("make", "mime"), MEDIA)
def test_embedded_claim_reads_back_exactly_trusted_and_signed_by_the_test_leaf(
    make: MediaMaker, mime: str, tmp_path: Path, ca: PlatformCA, signer: PlatformSigner
) -> None:
    dst, claim = signed(make, mime, tmp_path, signer)

    report = provenance.read(dst, mime, ca.root_pem)

    assert report.valid, report.reason
    assert (report.problem, report.failures, report.trusted) == (None, (), True)
    assert report.claim == claim
    assert report.signer is not None
    assert dict(report.signer.subject) == ca.leaf_subject
    assert dict(report.signer.issuer) == ca.root_subject
    assert report.signer.serial_number == ca.leaf_serial
    assert report.signer.algorithm == "es256"


def test_standard_c2pa_reader_sees_an_ai_created_work_by_aigc_hub(
    tmp_path: Path, signer: PlatformSigner
) -> None:
    dst, claim = signed(make_jpeg, "image/jpeg", tmp_path, signer)

    # What any C2PA tool sees: c2pa's own reader with its default settings, none of ours.
    with dst.open("rb") as stream, c2pa.Reader("image/jpeg", stream) as reader:
        manifest = reader.get_active_manifest()
    assertions = {a["label"]: a["data"] for a in manifest["assertions"]}

    assert manifest["claim_generator_info"][0]["name"] == "aigc-hub"
    # c2pa writes the actions assertion as its current version, c2pa.actions.v2.
    (created,) = assertions["c2pa.actions.v2"]["actions"]
    assert created == {
        "action": "c2pa.created",
        "digitalSourceType": provenance.TRAINED_ALGORITHMIC_MEDIA,
        "softwareAgent": {"name": "wan-video", "version": "2.1"},
    }
    assert assertions[provenance.AVCC_LABEL] == json.loads(claim.model_dump_json())


def test_without_trust_anchors_only_integrity_is_judged(
    tmp_path: Path, signer: PlatformSigner
) -> None:
    dst, claim = signed(make_png, "image/png", tmp_path, signer)

    report = provenance.read(dst, "image/png", None)

    assert report.valid and report.trusted is None and report.claim == claim


@pytest.mark.parametrize(
    ("make", "mime", "media_byte", "code"),
    [
        pytest.param(make_jpeg, "image/jpeg", jpeg_scan_byte, "assertion.dataHash.mismatch"),
        pytest.param(make_png, "image/png", png_idat_byte, "assertion.dataHash.mismatch"),
        pytest.param(
            make_mp4, "video/mp4", mp4_mdat_byte, "assertion.bmffHash.mismatch",
            marks=pytest.mark.ffmpeg,
        ),
    ],
    ids=["jpeg-scan", "png-idat", "mp4-mdat"],
)  # fmt: skip
def test_a_byte_changed_in_the_media_data_is_a_hash_mismatch(
    make: MediaMaker,
    mime: str,
    media_byte: Callable[[bytes], int],
    code: str,
    tmp_path: Path,
    ca: PlatformCA,
    signer: PlatformSigner,
) -> None:
    dst, claim = signed(make, mime, tmp_path, signer)
    flip(dst, media_byte(dst.read_bytes()))

    report = provenance.read(dst, mime, ca.root_pem)

    assert not report.valid
    assert report.problem is Problem.INVALID
    assert report.trusted is True  # the signer is still ours; the media is what changed
    assert [status.code for status in report.failures] == [code]
    assert code in report.reason
    assert report.claim == claim  # the claim is still shown, but not vouched for


def test_a_work_signed_by_another_ca_is_untrusted_with_the_reason(
    tmp_path: Path, ca: PlatformCA
) -> None:
    other = make_ca(tmp_path / "other", org="Someone Else")
    dst, _ = signed(
        make_jpeg, "image/jpeg", tmp_path, PlatformSigner(other.chain_pem, other.key_pem)
    )

    report = provenance.read(dst, "image/jpeg", ca.root_pem)

    assert not report.valid and report.trusted is False
    assert report.problem is Problem.UNTRUSTED
    assert [s.code for s in report.failures] == [provenance.UNTRUSTED_CODE]
    assert "signingCredential.untrusted: signing certificate untrusted" in report.reason
    assert report.signer is not None and dict(report.signer.issuer) == other.root_subject


def test_an_ed25519_signer_is_accepted(tmp_path: Path) -> None:
    ed_ca = make_ca(tmp_path / "ed", leaf_key="ed25519")
    ed_signer = PlatformSigner(ed_ca.chain_pem, ed_ca.key_pem, algorithm="ed25519")
    dst, claim = signed(make_jpeg, "image/jpeg", tmp_path, ed_signer)

    report = provenance.read(dst, "image/jpeg", ed_ca.root_pem)

    assert report.valid and report.claim == claim
    assert report.signer is not None and report.signer.algorithm == "ed25519"


@pytest.mark.parametrize("mime", ["image/gif", "text/plain"])
def test_an_unsupported_mime_is_refused_naming_the_supported_types(
    mime: str, tmp_path: Path, signer: PlatformSigner
) -> None:
    src = make_jpeg(tmp_path)

    with pytest.raises(UnsupportedMedia) as embedding:
        provenance.embed(src, tmp_path / "out", mime, claim_for(src), signer)
    with pytest.raises(UnsupportedMedia) as reading:
        provenance.read(src, mime, None)

    for raised in (embedding.value, reading.value):
        assert isinstance(raised, InvalidInput) and raised.field == "mime"
        assert "image/jpeg, image/png, video/mp4" in raised.message


def test_a_file_without_a_manifest_is_reported_as_such(tmp_path: Path) -> None:
    report = provenance.read(make_jpeg(tmp_path), "image/jpeg", None)

    assert not report.valid
    assert report.problem is Problem.NO_MANIFEST and report.claim is None


#: The actions assertion alone, as another tool making an AI-generated work might write it.
AI_CREATED = {
    "label": "c2pa.actions",
    "data": {
        "actions": [
            {"action": "c2pa.created", "digitalSourceType": provenance.TRAINED_ALGORITHMIC_MEDIA}
        ]
    },
}


def _sign_raw(assertions: list[object], src: Path, dst: Path, signer: PlatformSigner) -> None:
    """Sign a manifest of the test's own making with c2pa directly (as another tool would)."""
    definition = {"claim_generator_info": [{"name": "another-tool"}], "assertions": assertions}
    with (
        signer.native() as native,
        c2pa.Builder(definition) as builder,
        src.open("rb") as source,
        dst.open("w+b") as out,
    ):
        builder.sign(native, "image/jpeg", source, out)


def test_a_manifest_without_the_avcc_assertion_is_reported_as_no_claim(
    tmp_path: Path, signer: PlatformSigner
) -> None:
    src = make_jpeg(tmp_path)
    _sign_raw([AI_CREATED], src, tmp_path / "other.jpg", signer)

    report = provenance.read(tmp_path / "other.jpg", "image/jpeg", None)

    assert not report.valid and report.problem is Problem.NO_CLAIM and report.claim is None


def test_a_malformed_avcc_assertion_is_reported_with_the_field_at_fault(
    tmp_path: Path, signer: PlatformSigner
) -> None:
    src, bad_path = make_jpeg(tmp_path), tmp_path / "bad.jpg"
    bad = {**claim_for(src).model_dump(mode="json"), "final_level": "X"}
    _sign_raw([AI_CREATED, {"label": provenance.AVCC_LABEL, "data": bad}], src, bad_path, signer)

    report = provenance.read(bad_path, "image/jpeg", None)

    assert not report.valid and report.problem is Problem.MALFORMED_CLAIM
    assert "final_level" in report.reason and report.claim is None


def test_embed_refuses_a_work_the_claim_does_not_name(
    tmp_path: Path, signer: PlatformSigner
) -> None:
    src = make_jpeg(tmp_path)
    other = make_png(tmp_path)

    with pytest.raises(InvalidInput) as raised:
        provenance.embed(src, tmp_path / "out.jpg", "image/jpeg", claim_for(other), signer)

    assert raised.value.field == "content_hash"
    assert not (tmp_path / "out.jpg").exists()


def test_a_file_that_is_not_its_media_type_is_unreadable(
    tmp_path: Path, signer: PlatformSigner
) -> None:
    junk = tmp_path / "junk.jpg"
    junk.write_bytes(b"\xff\xd8\xff" + b"not a picture" * 20)

    with pytest.raises(UnreadableMedia, match=r"junk\.jpg is not a readable image/jpeg"):
        provenance.embed(junk, tmp_path / "out.jpg", "image/jpeg", claim_for(junk), signer)
    assert not (tmp_path / "out.jpg").exists()
    with pytest.raises(UnreadableMedia, match=r"junk\.jpg is not a readable image/jpeg"):
        provenance.read(junk, "image/jpeg", None)


def test_signer_refuses_credentials_that_cannot_work(tmp_path: Path, ca: PlatformCA) -> None:
    other = make_ca(tmp_path / "other")

    with pytest.raises(ConfigurationError, match="not the first certificate's key"):
        PlatformSigner(ca.chain_pem, other.key_pem)
    with pytest.raises(ConfigurationError, match="unreadable PEM"):
        PlatformSigner(b"not a certificate", ca.key_pem)
    with pytest.raises(ConfigurationError, match="unreadable PEM"):
        PlatformSigner(ca.chain_pem, b"not a key")
    with pytest.raises(ConfigurationError, match="C2PA signer"):
        PlatformSigner(ca.chain_pem, ca.key_pem, algorithm="ed25519")  # a P-256 key


def test_a_leaf_without_extended_key_usage_is_rejected_at_signing(tmp_path: Path) -> None:
    bare = make_ca(tmp_path / "bare", leaf_ekus=())
    src = make_jpeg(tmp_path)

    with pytest.raises(ConfigurationError, match="C2PA signing rejected"):
        provenance.embed(
            src, tmp_path / "out.jpg", "image/jpeg", claim_for(src),
            PlatformSigner(bare.chain_pem, bare.key_pem),
        )  # fmt: skip
    assert not (tmp_path / "out.jpg").exists()
