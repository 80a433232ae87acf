"""A certificate authority of the platform's own for C2PA signing, made with ``cryptography``.

On embedded defaults (no ``AIGC_HUB_AVCC_C2PA_CERT_PATH``) the hub makes one in its data dir
(:func:`platform_signer`): its manifests verify as intact and signed, and are trusted by
whoever imports its ``root.pem``; a production platform signs with a certificate from a CA
on the C2PA trust list instead. The tests make throwaway ones the same way.

:func:`make_ca` writes a root CA (P-256) and a claim-signing leaf issued by it (P-256 for
ES256, or Ed25519) to a directory, as the PEM files a platform signer is built from.

What c2pa-python 0.38.1 (c2pa-rs 0.91.3) enforced of the leaf, found by signing with
variants of it. Refused when signing, as "the certificate is invalid":

* no extended key usage, or only serverAuth, or anyExtendedKeyUsage;
* no key usage, or key usage without digitalSignature;
* a leaf that is a CA (basicConstraints ``ca=True``), or self-signed;
* no authority key identifier;
* outside its validity window ("the certificate was not valid at time of signing").

Signed, then failed by c2pa's check of what it wrote ("signingCredential.invalid: certificate
missing required EKU"): a leaf whose only EKU is documentSigning (1.3.6.1.5.5.7.3.36) or
C2PA's claim-signing EKU; c2pa's default EKU list wants emailProtection (1.3.6.1.5.5.7.3.4),
which is what the leaf carries. Not required: basicConstraints at all, a critical key usage,
a subject key identifier (the leaf has one anyway, as a real CA's would), the root in the
chain (leaf alone or leaf + root both verify as trusted).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .provenance import PlatformSigner

LeafKey = Literal["p256", "ed25519"]


@dataclass(frozen=True)
class PlatformCA:
    """A root and the leaf it issued, as PEM bytes and files."""

    root_pem: bytes
    leaf_pem: bytes
    key_pem: bytes
    chain_path: Path
    key_path: Path
    root_path: Path
    root_subject: dict[str, str]  # short attribute name -> value, as c2pa reports names
    leaf_subject: dict[str, str]
    leaf_serial: int

    @property
    def chain_pem(self) -> bytes:
        """The chain a signer embeds: the leaf first, then its issuer."""
        return self.leaf_pem + self.root_pem


def _name(common_name: str, org: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "CN"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _attributes(name: x509.Name) -> dict[str, str]:
    return {attr.rfc4514_attribute_name: str(attr.value) for attr in name}


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_ca(
    directory: Path,
    org: str = "AIGC Hub Test",
    *,
    leaf_key: LeafKey = "p256",
    leaf_ekus: Sequence[x509.ObjectIdentifier] = (ExtendedKeyUsageOID.EMAIL_PROTECTION,),
    valid_days: int = 30,
) -> PlatformCA:
    """A new root CA (P-256) and a claim-signing leaf issued by it, written under
    ``directory`` (``chain.pem`` = leaf + root, ``signer.key``, ``root.pem``). ``leaf_ekus``
    empty leaves the extended key usage out (a leaf C2PA rejects)."""
    now = dt.datetime.now(dt.UTC)
    # Backdated an hour so a clock a little behind still sees both certificates as valid.
    not_before, not_after = now - dt.timedelta(hours=1), now + dt.timedelta(days=valid_days)

    root_key = ec.generate_private_key(ec.SECP256R1())
    root_name = _name(f"{org} Root CA", org)
    root_ski = x509.SubjectKeyIdentifier.from_public_key(root_key.public_key())
    root = (
        x509.CertificateBuilder()
        .subject_name(root_name)
        .issuer_name(root_name)
        .public_key(root_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(root_ski, critical=False)
        .sign(root_key, hashes.SHA256())
    )

    signing_key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey = (
        ec.generate_private_key(ec.SECP256R1())
        if leaf_key == "p256"
        else ed25519.Ed25519PrivateKey.generate()
    )
    leaf_name = _name(f"{org} C2PA Signer", org)
    builder = (
        x509.CertificateBuilder()
        .subject_name(leaf_name)
        .issuer_name(root_name)
        .public_key(signing_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(signing_key.public_key()), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(root_ski),
            critical=False,
        )
    )
    if leaf_ekus:
        builder = builder.add_extension(x509.ExtendedKeyUsage(leaf_ekus), critical=False)
    leaf = builder.sign(root_key, hashes.SHA256())

    key_pem = signing_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    directory.mkdir(parents=True, exist_ok=True)
    ca = PlatformCA(
        root_pem=_pem(root),
        leaf_pem=_pem(leaf),
        key_pem=key_pem,
        chain_path=directory / "chain.pem",
        key_path=directory / "signer.key",
        root_path=directory / "root.pem",
        root_subject=_attributes(root_name),
        leaf_subject=_attributes(leaf_name),
        leaf_serial=leaf.serial_number,
    )
    ca.chain_path.write_bytes(ca.chain_pem)
    ca.key_path.write_bytes(key_pem)
    ca.root_path.write_bytes(ca.root_pem)
    return ca


def platform_signer(directory: Path, org: str = "AIGC Hub") -> PlatformSigner:
    """The signer whose CA lives in ``directory``, made there on first use (files 0600)."""
    chain, key = directory / "chain.pem", directory / "signer.key"
    if not (chain.exists() and key.exists()):
        directory.mkdir(parents=True, exist_ok=True)
        make_ca(directory, org, valid_days=3650)
        key.chmod(0o600)
    return PlatformSigner.from_files(chain, key)
