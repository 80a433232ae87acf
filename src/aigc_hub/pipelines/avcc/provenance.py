"""The AVCC code travels inside the work: a signed C2PA manifest, embedded and read back.

:func:`embed` writes a copy of a tenant's image or MP4 carrying a C2PA manifest signed with
the platform's key. Its assertions hold the :class:`CodeClaim` (label :data:`AVCC_LABEL`) and
the standard ``c2pa.actions``: the work was created (``c2pa.created``) by the AI tool named as
``softwareAgent``, digital source type ``trainedAlgorithmicMedia``. Anyone holding the file
can check it with standard C2PA tooling, without asking us.

:func:`read` parses the manifest back into a :class:`ManifestReport`: the claim, c2pa's
failure codes, the signer's certificate, and whether the file is valid (and trusted, when
trust anchors are given).

Both run synchronously and do file I/O and signing in native code: the caller runs them in a
worker thread. Each call builds its own c2pa context, so calls on several threads share
nothing. The c2pa library (c2pa-python, Adobe's bindings of the c2pa-rs SDK) does all of the
format and COSE work; this module only says what goes in and reads what comes out.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Final, Literal

import c2pa  # type: ignore[import-untyped]  # the bindings ship no type information
import pydantic
from cryptography import x509
from cryptography.hazmat.primitives import serialization

import aigc_hub
from aigc_hub.core.errors import ConfigurationError, InvalidInput
from aigc_hub.pipelines.avcc import manifest_store
from aigc_hub.pipelines.avcc.manifest_store import SignerCertificate, ValidationStatus

#: The claim's assertion label: C2PA reserves ``c2pa.*``; others use reverse-domain names.
AVCC_LABEL: Final = "org.aigc-hub.avcc"
#: IPTC digital source type of media made by a trained model (what avcc codes are for).
TRAINED_ALGORITHMIC_MEDIA: Final = (
    "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia"
)
CLAIM_GENERATOR: Final = "aigc-hub"
SUPPORTED_MIME_TYPES: Final = ("image/jpeg", "image/png", "video/mp4")
#: The failure c2pa reports when the signer does not chain to the trust anchors.
UNTRUSTED_CODE: Final = "signingCredential.untrusted"

SigningAlgorithm = Literal["es256", "es384", "es512", "ps256", "ps384", "ps512", "ed25519"]


def _settings(*, verify_trust: bool, trust_anchors_pem: bytes | None = None) -> dict[str, object]:
    """c2pa settings with no network: no remote manifests, no OCSP. Thumbnails are off: a
    copy of the work inside its own manifest adds bytes, not proof."""
    verify = {"remote_manifest_fetch": False, "ocsp_fetch": False, "verify_trust": verify_trust}
    settings: dict[str, object] = {"verify": verify, "builder": {"thumbnail": {"enabled": False}}}
    if trust_anchors_pem is not None:
        # trust_anchors replaces c2pa's built-in list: only the roots given are trusted.
        settings["trust"] = {"trust_anchors": trust_anchors_pem.decode("ascii")}
    return settings


class UnsupportedMedia(InvalidInput):
    """The work's media type cannot carry an AVCC manifest."""

    def __init__(self, mime: str) -> None:
        supported = ", ".join(SUPPORTED_MIME_TYPES)
        super().__init__("mime", f"cannot embed a C2PA manifest in {mime!r}: use {supported}")


class UnreadableMedia(InvalidInput):
    """The file is not the media its type says (c2pa cannot parse it)."""

    def __init__(self, path: Path, mime: str, detail: str) -> None:
        super().__init__("path", f"{path.name} is not a readable {mime}: {detail}")


class _Frozen(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")


class AiTool(_Frozen):
    """The model that generated the work."""

    model_name: str = pydantic.Field(min_length=1)
    model_version: str = pydantic.Field(min_length=1)


class ChainRef(_Frozen):
    """Where the work was notarized."""

    chain_type: str = pydantic.Field(min_length=1)
    tx_hash: str = pydantic.Field(min_length=1)
    block_height: int = pydantic.Field(ge=0)
    crd_address: str


class CodeClaim(_Frozen):
    """What the manifest asserts about a work: its code, level, review and notarization."""

    avcc_code: str = pydantic.Field(min_length=1)
    final_level: Literal["P", "G", "O"]
    avcc_record_id: int
    content_hash: str = pydantic.Field(pattern=r"^sha256:[0-9a-f]{64}$")
    issued_at_ms: int = pydantic.Field(ge=0)
    ai_tool: AiTool
    chain: ChainRef
    proof: dict[str, pydantic.JsonValue]  # the log receipt, opaque here


@dataclass(frozen=True)
class PlatformSigner:
    """The platform's signing credentials: a PEM chain (the signing certificate first, then
    its intermediates; c2pa accepts the root at the end too) and that certificate's PEM key.

    Checked when built: a chain and key that cannot work raise ``ConfigurationError`` here,
    not at the first embed. ``tsa_url`` asks a timestamp authority for an RFC 3161 stamp
    at each signing (a network call; keeps signatures checkable after the cert expires).
    """

    chain_pem: bytes
    key_pem: bytes = field(repr=False)
    algorithm: SigningAlgorithm = "es256"
    tsa_url: str | None = None

    def __post_init__(self) -> None:
        try:
            chain = x509.load_pem_x509_certificates(self.chain_pem)
            key = serialization.load_pem_private_key(self.key_pem, password=None)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"C2PA signer: unreadable PEM ({exc})") from exc
        spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        if key.public_key().public_bytes(*spki) != chain[0].public_key().public_bytes(*spki):
            raise ConfigurationError("C2PA signer: the key is not the first certificate's key")
        self.native().close()  # c2pa's own check of algorithm and key, before any work

    @classmethod
    def from_files(
        cls,
        chain_path: Path,
        key_path: Path,
        algorithm: SigningAlgorithm = "es256",
        tsa_url: str | None = None,
    ) -> PlatformSigner:
        """A signer from a PEM chain file and a PEM key file."""
        return cls(chain_path.read_bytes(), key_path.read_bytes(), algorithm, tsa_url)

    def anchor_pem(self) -> bytes:
        """The last certificate of the chain (the root, when the chain carries it): what a
        validator is given as a trust anchor for this signer's manifests."""
        last = x509.load_pem_x509_certificates(self.chain_pem)[-1]
        return last.public_bytes(serialization.Encoding.PEM)

    def native(self) -> c2pa.Signer:
        """A new c2pa signer: one per signing, the caller closes it."""
        info = c2pa.C2paSignerInfo(self.algorithm, self.chain_pem, self.key_pem, self.tsa_url)
        try:
            return c2pa.Signer.from_info(info)
        except c2pa.C2paError as exc:
            raise ConfigurationError(f"C2PA signer: {exc}") from exc


def manifest_definition(claim: CodeClaim) -> dict[str, object]:
    """The manifest :func:`embed` signs for ``claim`` (c2pa's manifest-definition JSON)."""
    created = {
        "action": "c2pa.created",
        "digitalSourceType": TRAINED_ALGORITHMIC_MEDIA,
        "softwareAgent": {"name": claim.ai_tool.model_name, "version": claim.ai_tool.model_version},
    }
    return {
        "claim_generator_info": [{"name": CLAIM_GENERATOR, "version": aigc_hub.__version__}],
        "assertions": [
            {"label": "c2pa.actions", "data": {"actions": [created]}},
            {"label": AVCC_LABEL, "data": claim.model_dump(mode="json")},
        ],
    }


def _check_mime(mime: str) -> None:
    if mime not in SUPPORTED_MIME_TYPES:
        raise UnsupportedMedia(mime)


def embed(src: Path, dst: Path, mime: str, claim: CodeClaim, signer: PlatformSigner) -> None:
    """Write ``dst``: ``src`` with a manifest carrying ``claim``, signed by ``signer``.

    Synchronous (file I/O and signing): run it in a worker thread. ``src`` must be the work
    ``claim.content_hash`` names (``InvalidInput`` otherwise), so a code never lands on the
    wrong work. c2pa verifies what it wrote before returning; credentials it rejects raise
    ``ConfigurationError``, a file it cannot parse :class:`UnreadableMedia`; either way
    no ``dst`` is left behind. An existing ``dst`` is overwritten.
    """
    _check_mime(mime)
    with src.open("rb") as source:
        digest = "sha256:" + hashlib.file_digest(source, "sha256").hexdigest()
    if digest != claim.content_hash:
        raise InvalidInput("content_hash", f"{src.name} hashes to {digest}, not the claim's")
    # Trust is read()'s question; signing needs no anchors, only c2pa's profile checks.
    settings = _settings(verify_trust=False)
    try:
        with (
            signer.native() as native,
            c2pa.Context.from_dict(settings) as context,
            c2pa.Builder(manifest_definition(claim), context=context) as builder,
            src.open("rb") as source,
            dst.open("w+b") as target,
        ):
            builder.sign(native, mime, source, target)
    except (c2pa.C2paError.Signature, c2pa.C2paError.Verify) as exc:
        # Signature: the certificate fails C2PA's profile; Verify: what was signed fails
        # c2pa's own check. Neither is the work's fault: the credentials need fixing.
        dst.unlink(missing_ok=True)
        raise ConfigurationError(f"C2PA signing rejected: {exc}") from exc
    except c2pa.C2paError as exc:
        dst.unlink(missing_ok=True)
        raise UnreadableMedia(src, mime, str(exc)) from exc


class Problem(Enum):
    """Why a report is not valid."""

    NO_MANIFEST = "no_manifest"  # the file carries no C2PA manifest at all
    NO_CLAIM = "no_claim"  # a manifest, but not one with an AVCC claim
    MALFORMED_CLAIM = "malformed_claim"  # the AVCC assertion is not a CodeClaim
    INVALID = "invalid"  # c2pa reports failures: altered media, bad signature...
    UNTRUSTED = "untrusted"  # intact, but the signer does not chain to the anchors given


@dataclass(frozen=True)
class ManifestReport:
    """What :func:`read` found. ``valid``: a well-formed claim and no c2pa failure (so the
    media is unaltered, the signature good and, when anchors were given, the signer trusted).
    Otherwise ``problem`` says which case and ``reason`` says it in words."""

    valid: bool
    claim: CodeClaim | None = None
    problem: Problem | None = None
    reason: str = ""
    failures: tuple[ValidationStatus, ...] = ()
    trusted: bool | None = None  # the signer chains to an anchor; None: no anchors given
    signer: SignerCertificate | None = None
    manifest_label: str | None = None


def read(path: Path, mime: str, trust_anchors_pem: bytes | None) -> ManifestReport:
    """The AVCC manifest of the file at ``path``, validated by c2pa.

    Synchronous: run it in a worker thread. With ``trust_anchors_pem`` (PEM roots) the
    signer must chain to one of them to be valid; without, only integrity and signature are
    judged and ``trusted`` is None. A file without a manifest is a report (``NO_MANIFEST``),
    not an error; a file c2pa cannot parse raises :class:`UnreadableMedia`.
    """
    _check_mime(mime)
    # Without anchors there is nothing to chain to: c2pa would call every signer untrusted.
    trusting = trust_anchors_pem is not None
    settings = _settings(verify_trust=trusting, trust_anchors_pem=trust_anchors_pem)
    try:
        with c2pa.Context.from_dict(settings) as context, path.open("rb") as stream:
            reader = c2pa.Reader.try_create(mime, stream, None, context)
            if reader is None:
                return ManifestReport(False, problem=Problem.NO_MANIFEST, reason="no C2PA manifest")
            with reader:
                store = manifest_store.parse(reader.json(), reader.crjson())
    except c2pa.C2paError as exc:
        raise UnreadableMedia(path, mime, str(exc)) from exc
    return _report(store, trusting=trusting)


def _report(manifest: manifest_store.ActiveManifest, *, trusting: bool) -> ManifestReport:
    """The report on a parsed manifest: the claim first, then c2pa's verdict on the file."""
    found = functools.partial(
        ManifestReport,
        failures=manifest.failures,
        trusted=manifest.signer_trusted if trusting else None,
        signer=manifest.signer,
        manifest_label=manifest.label,
    )
    if AVCC_LABEL not in manifest.assertions:
        return found(False, problem=Problem.NO_CLAIM, reason=f"no {AVCC_LABEL} assertion")
    try:
        claim = CodeClaim.model_validate(manifest.assertions[AVCC_LABEL])
    except pydantic.ValidationError as exc:
        reason = f"{AVCC_LABEL} is not a code claim: {exc}"
        return found(False, problem=Problem.MALFORMED_CLAIM, reason=reason)
    codes = {status.code for status in manifest.failures}
    if not codes:
        return found(True, claim=claim)
    reason = "; ".join(f"{s.code}: {s.explanation}" for s in manifest.failures)
    # Untrusted alone means an intact file from another signer; anything else, a bad file.
    problem = Problem.UNTRUSTED if codes == {UNTRUSTED_CODE} else Problem.INVALID
    return found(False, claim=claim, problem=problem, reason=reason)
