"""Signed tree heads (STH) of avcc's transparency log, and the log's Ed25519 key.

A head says "the log of ``log_id`` had ``tree_size`` leaves with root ``root_hash`` at
``timestamp_ms``", signed with the log's Ed25519 key. The signed bytes (:func:`signed_bytes`)
are a fixed-length, versioned encoding, v1::

    b"aigc-hub/avcc/tree-head/v1\\n"   27 bytes: domain separation and version
    log_id                            32 bytes: SHA-256 of the raw Ed25519 public key
    tree_size                          8 bytes: unsigned, big-endian
    timestamp_ms                       8 bytes: unsigned, big-endian, epoch milliseconds
    root_hash                         32 bytes: RFC 9162 MTH of the first tree_size leaves

Every field has a fixed length, so no two heads share their bytes; the prefix keeps a head's
signature from being valid for anything else the key might ever sign, and a v2 would change it.
The key lives in a PEM file (PKCS#8, unencrypted, mode 0600) created on first use.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from aigc_hub.core.errors import ConfigurationError, InvalidInput
from aigc_hub.pipelines.avcc.merkle import HASH_SIZE, VerificationError

SIGNED_PREFIX = b"aigc-hub/avcc/tree-head/v1\n"
SIGNATURE_SIZE = 64
_UINT64_MAX = 2**64 - 1


@dataclass(frozen=True)
class SignedTreeHead:
    """A tree head and the log's signature over :func:`signed_bytes` of it."""

    log_id: str
    tree_size: int
    root_hash: bytes
    timestamp_ms: int
    signature: bytes

    def __post_init__(self) -> None:
        # Checked at construction, so a head read from JSON or a row is well-formed or absent.
        if len(self.log_id) != 2 * HASH_SIZE or not _is_hex(self.log_id):
            raise InvalidInput("log_id", "a log id is 64 lowercase hex digits")
        for field, value in (("tree_size", self.tree_size), ("timestamp_ms", self.timestamp_ms)):
            if not 0 <= value <= _UINT64_MAX:
                raise InvalidInput(field, f"{field} {value} is not an unsigned 64-bit integer")
        if len(self.root_hash) != HASH_SIZE:
            raise InvalidInput("root_hash", f"a root hash has {HASH_SIZE} bytes")
        if len(self.signature) != SIGNATURE_SIZE:
            raise InvalidInput("signature", f"an Ed25519 signature has {SIGNATURE_SIZE} bytes")


def _is_hex(text: str) -> bool:
    return all(char in "0123456789abcdef" for char in text)


def signed_bytes(log_id: str, tree_size: int, timestamp_ms: int, root_hash: bytes) -> bytes:
    """The exact bytes a head's signature covers (v1, see the module docstring)."""
    return (
        SIGNED_PREFIX
        + bytes.fromhex(log_id)
        + struct.pack(">QQ", tree_size, timestamp_ms)
        + root_hash
    )


def raw_public_key(public_key: Ed25519PublicKey) -> bytes:
    """The 32 raw bytes of an Ed25519 public key."""
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def log_id_of(public_key: Ed25519PublicKey) -> str:
    """The id of the log that signs with this key: hex SHA-256 of the raw public key."""
    return hashlib.sha256(raw_public_key(public_key)).hexdigest()


def sign_head(
    private_key: Ed25519PrivateKey, tree_size: int, root_hash: bytes, timestamp_ms: int
) -> SignedTreeHead:
    """A head of ``tree_size`` leaves with ``root_hash``, signed by the log's key."""
    log_id = log_id_of(private_key.public_key())
    signature = private_key.sign(signed_bytes(log_id, tree_size, timestamp_ms, root_hash))
    return SignedTreeHead(log_id, tree_size, root_hash, timestamp_ms, signature)


def verify_head(head: SignedTreeHead, public_key: Ed25519PublicKey) -> None:
    """Check that ``head`` is of the log of ``public_key`` and carries its valid signature;
    raises :class:`~aigc_hub.pipelines.avcc.merkle.VerificationError` naming what failed."""
    expected = log_id_of(public_key)
    if head.log_id != expected:
        raise VerificationError(
            "log_id",
            f"the head is of log {head.log_id}, not of log {expected} whose key was given",
        )
    message = signed_bytes(head.log_id, head.tree_size, head.timestamp_ms, head.root_hash)
    try:
        public_key.verify(head.signature, message)
    except InvalidSignature:
        raise VerificationError(
            "signature", f"the signature of the head of size {head.tree_size} is not valid"
        ) from None


def public_key_pem(public_key: Ed25519PublicKey) -> bytes:
    """The public key as PEM (SubjectPublicKeyInfo), what verifiers are given."""
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM; :class:`VerificationError` when it is not one."""
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as error:
        raise VerificationError("public_key", f"not a PEM public key: {error}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise VerificationError("public_key", f"the key is {type(key).__name__}, not Ed25519")
    return key


def load_or_create_key(path: Path) -> Ed25519PrivateKey:
    """The log's private key from the PEM file at ``path``, created (mode 0600) when missing.

    Two processes starting at once end with the same key: the new file is written aside and
    linked into place, which fails if another process linked its key first (then that is read).
    """
    if not path.exists():
        _create_key_file(path)
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as error:
        raise ConfigurationError(f"{path} is not an unencrypted PEM private key: {error}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigurationError(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
    return key


def _create_key_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # mkstemp creates the file with mode 0600 before a byte of the key is written.
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(pem)
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileExistsError):  # another process's key won: use it
            os.link(temporary, path)
    finally:
        os.unlink(temporary)
