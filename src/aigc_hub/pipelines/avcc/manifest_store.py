"""A C2PA manifest store as c2pa's ``Reader`` describes it, parsed into typed values.

The reader gives two JSON views of one store: ``json()`` (the manifests by label, the
assertions, ``validation_results``) and ``crjson()``, the C2PA-standard view that alone names
the signing certificate's full subject and issuer. :func:`parse` reads the active manifest
out of both, so nothing downstream indexes c2pa's JSON by string keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import pydantic

#: The success code c2pa reports when the signer chains to a configured trust anchor.
TRUSTED_CODE: Final = "signingCredential.trusted"


@dataclass(frozen=True)
class ValidationStatus:
    """One of c2pa's validation status entries (codes as in the C2PA specification, e.g.
    ``assertion.dataHash.mismatch``, ``signingCredential.untrusted``)."""

    code: str
    url: str | None
    explanation: str | None


@dataclass(frozen=True)
class SignerCertificate:
    """The certificate a manifest was signed with."""

    subject: Mapping[str, str]  # attribute short name (C, O, CN...) -> value
    issuer: Mapping[str, str]
    serial_number: int
    algorithm: str


@dataclass(frozen=True)
class ActiveManifest:
    """The manifest that speaks for the file, and what c2pa concluded of it."""

    label: str
    assertions: Mapping[str, pydantic.JsonValue]  # label -> data, first of each label
    failures: tuple[ValidationStatus, ...]
    signer: SignerCertificate | None
    signer_trusted: bool  # c2pa found the signer's chain ends in a trust anchor


class _View(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore", populate_by_name=True)


class _Status(_View):
    code: str
    url: str | None = None
    explanation: str | None = None


class _StatusCodes(_View):
    success: list[_Status] = []
    failure: list[_Status] = []


class _Results(_View):
    active_manifest: _StatusCodes | None = pydantic.Field(None, alias="activeManifest")


class _Assertion(_View):
    label: str
    data: pydantic.JsonValue = None


class _Manifest(_View):
    assertions: list[_Assertion] = []


class _Store(_View):
    active_manifest: str
    manifests: dict[str, _Manifest]
    validation_results: _Results | None = None


class _CertificateInfo(_View):
    serial_number: str = pydantic.Field(alias="serialNumber")
    subject: dict[str, str]
    issuer: dict[str, str]


class _Signature(_View):
    algorithm: str
    certificate_info: _CertificateInfo | None = pydantic.Field(None, alias="certificateInfo")


class _CrManifest(_View):
    label: str
    signature: _Signature | None = None


class _CrStore(_View):
    manifests: list[_CrManifest] = []


def _signer(crjson: str, label: str) -> SignerCertificate | None:
    for manifest in _CrStore.model_validate_json(crjson).manifests:
        signature = manifest.signature
        if manifest.label == label and signature and signature.certificate_info:
            info = signature.certificate_info
            serial = int(info.serial_number, 16)  # hex, as in the certificate
            return SignerCertificate(info.subject, info.issuer, serial, signature.algorithm)
    return None


def parse(store_json: str, crjson: str) -> ActiveManifest:
    """The active manifest of the store c2pa's reader described as ``store_json`` (its
    ``json()``) and ``crjson`` (its ``crjson()``). Raises ``ValueError`` if c2pa's JSON lacks
    what every store has (an active manifest among the manifests): a c2pa release whose
    JSON this module does not know."""
    store = _Store.model_validate_json(store_json)
    manifest = store.manifests.get(store.active_manifest)
    if manifest is None:
        raise ValueError(f"c2pa named {store.active_manifest!r} active but did not list it")
    assertions: dict[str, pydantic.JsonValue] = {}
    for assertion in manifest.assertions:
        assertions.setdefault(assertion.label, assertion.data)
    results = store.validation_results
    codes = results.active_manifest if results and results.active_manifest else _StatusCodes()
    return ActiveManifest(
        label=store.active_manifest,
        assertions=assertions,
        failures=tuple(ValidationStatus(s.code, s.url, s.explanation) for s in codes.failure),
        signer=_signer(crjson, store.active_manifest),
        signer_trusted=any(s.code == TRUSTED_CODE for s in codes.success),
    )
