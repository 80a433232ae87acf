"""Signed tree heads and offline receipts: what verifies, and each way a receipt is refused
(tampered leaf or path, another log's key, a bad signature, malformed JSON); plus the log's
key file (created 0600, reused, refused when it is no Ed25519 key)."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from aigc_hub.core.errors import ConfigurationError, InvalidInput
from aigc_hub.pipelines.avcc import merkle, tree_heads
from aigc_hub.pipelines.avcc.merkle import MerkleTree, VerificationError
from aigc_hub.pipelines.avcc.receipts import Receipt, verify_receipt
from aigc_hub.pipelines.avcc.tree_heads import SignedTreeHead

DATA = [f"work-{i}".encode() for i in range(8)]
NOW_MS = 1_767_225_600_000


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def pem(key: Ed25519PrivateKey) -> bytes:
    return tree_heads.public_key_pem(key.public_key())


@pytest.fixture(scope="module")
def receipt(key: Ed25519PrivateKey) -> Receipt:
    """The receipt of leaf 5 of a tree of the eight works, under a head signed by ``key``."""
    tree = MerkleTree(merkle.leaf_hash(data) for data in DATA)
    head = tree_heads.sign_head(key, tree.size, tree.root(), NOW_MS)
    path = tuple(tree.inclusion_path(5))
    return Receipt(leaf_index=5, leaf_hash=tree.leaf(5), inclusion_path=path, tree_head=head)


def replaced(receipt: Receipt, **changes: object) -> Receipt:
    return receipt.model_copy(update=changes)


def test_a_receipt_verifies_offline_with_the_public_key_and_the_data(
    receipt: Receipt, pem: bytes, key: Ed25519PrivateKey
) -> None:
    verified = verify_receipt(receipt, pem, DATA[5])
    assert verified.log_id == tree_heads.log_id_of(key.public_key())
    assert (verified.leaf_index, verified.tree_size, verified.timestamp_ms) == (5, 8, NOW_MS)
    assert verified.data_checked
    assert not verify_receipt(receipt, pem).data_checked


def test_the_json_form_is_versioned_hex_and_round_trips(receipt: Receipt, pem: bytes) -> None:
    text = receipt.to_json()
    document = json.loads(text)
    assert list(document) == ["version", "leaf_index", "leaf_hash", "inclusion_path", "tree_head"]
    assert document["version"] == 1
    assert document["leaf_hash"] == receipt.leaf_hash.hex()
    assert document["tree_head"]["signature"] == receipt.tree_head.signature.hex()
    assert Receipt.from_json(text) == receipt
    assert Receipt.from_json(text).to_json() == text
    verify_receipt(Receipt.from_json(text.encode()), pem, DATA[5])


def test_other_data_than_the_leaf_is_refused(receipt: Receipt, pem: bytes) -> None:
    with pytest.raises(VerificationError, match=r"the data's leaf hash .* is not the receipt's"):
        verify_receipt(receipt, pem, DATA[4])


def test_a_tampered_leaf_hash_does_not_lead_to_the_root(receipt: Receipt, pem: bytes) -> None:
    tampered = replaced(receipt, leaf_hash=merkle.leaf_hash(b"forged"))
    with pytest.raises(VerificationError, match=r"leads to root .*, not the head's") as caught:
        verify_receipt(tampered, pem)
    assert caught.value.field == "inclusion_path"


def test_a_tampered_path_or_index_is_refused(receipt: Receipt, pem: bytes) -> None:
    path = list(receipt.inclusion_path)
    path[1] = bytes(32)
    for tampered in (
        replaced(receipt, inclusion_path=tuple(path)),
        replaced(receipt, inclusion_path=receipt.inclusion_path[:-1]),
        replaced(receipt, leaf_index=4),
    ):
        with pytest.raises(VerificationError) as caught:
            verify_receipt(tampered, pem, DATA[5])
        assert caught.value.field == "inclusion_path"


def test_a_receipt_of_another_log_is_refused_naming_both_logs(receipt: Receipt) -> None:
    other = Ed25519PrivateKey.generate().public_key()
    with pytest.raises(VerificationError) as caught:
        verify_receipt(receipt, tree_heads.public_key_pem(other), DATA[5])
    assert caught.value.field == "log_id"
    assert receipt.tree_head.log_id in caught.value.message
    assert tree_heads.log_id_of(other) in caught.value.message


def test_a_head_whose_signed_fields_changed_is_refused(receipt: Receipt, pem: bytes) -> None:
    head = receipt.tree_head
    forged_heads = [
        SignedTreeHead(head.log_id, head.tree_size, head.root_hash, head.timestamp_ms + 1,
                       head.signature),
        SignedTreeHead(head.log_id, head.tree_size + 1, head.root_hash, head.timestamp_ms,
                       head.signature),
        SignedTreeHead(head.log_id, head.tree_size, head.root_hash, head.timestamp_ms,
                       bytes(64)),
    ]  # fmt: skip
    for forged in forged_heads:
        with pytest.raises(VerificationError, match=r"signature of the head .* is not valid"):
            verify_receipt(replaced(receipt, tree_head=forged), pem)


def test_a_head_signed_by_the_right_key_over_another_domain_is_refused(
    key: Ed25519PrivateKey, receipt: Receipt, pem: bytes
) -> None:
    head = receipt.tree_head
    unprefixed = tree_heads.signed_bytes(
        head.log_id, head.tree_size, head.timestamp_ms, head.root_hash
    )[len(tree_heads.SIGNED_PREFIX) :]
    forged = SignedTreeHead(
        head.log_id, head.tree_size, head.root_hash, head.timestamp_ms, key.sign(unprefixed)
    )
    with pytest.raises(VerificationError) as caught:
        verify_receipt(replaced(receipt, tree_head=forged), pem)
    assert caught.value.field == "signature"


def test_the_signed_bytes_are_the_documented_fixed_layout(key: Ed25519PrivateKey) -> None:
    head = tree_heads.sign_head(key, 258, bytes(range(32)), 513)
    message = tree_heads.signed_bytes(head.log_id, 258, 513, bytes(range(32)))
    assert message == (
        b"aigc-hub/avcc/tree-head/v1\n"
        + bytes.fromhex(head.log_id)
        + (258).to_bytes(8, "big")
        + (513).to_bytes(8, "big")
        + bytes(range(32))
    )
    key.public_key().verify(head.signature, message)


def test_the_log_id_is_the_sha256_of_the_raw_public_key(key: Ed25519PrivateKey) -> None:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert tree_heads.log_id_of(key.public_key()) == hashlib.sha256(raw).hexdigest()


def test_a_public_key_that_is_no_ed25519_pem_is_refused(receipt: Receipt) -> None:
    with pytest.raises(VerificationError, match="not a PEM public key") as caught:
        verify_receipt(receipt, b"not a key")
    assert caught.value.field == "public_key"
    ec_pem = (
        generate_private_key(SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(VerificationError, match="not Ed25519"):
        verify_receipt(receipt, ec_pem)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda d: d.update(version=2), "version"),
        (lambda d: d.update(leaf_hash="zz" * 32), "leaf_hash"),
        (lambda d: d.update(leaf_hash="00" * 31), "leaf_hash"),
        (lambda d: d.update(leaf_index="5"), "leaf_index"),
        (lambda d: d.update(leaf_index=-1), "leaf_index"),
        (lambda d: d.update(extra=1), "extra"),
        (lambda d: d.pop("inclusion_path"), "inclusion_path"),
        (lambda d: d["tree_head"].update(signature="00" * 63), "signature"),
        (lambda d: d["tree_head"].update(log_id="AB" * 32), "log id"),
    ],
)
def test_malformed_receipt_json_is_refused_saying_what_is_wrong(
    receipt: Receipt, edit: object, problem: str
) -> None:
    document = json.loads(receipt.to_json())
    assert callable(edit)
    edit(document)
    with pytest.raises(VerificationError, match=problem) as caught:
        Receipt.from_json(json.dumps(document))
    assert caught.value.field == "receipt"
    assert isinstance(caught.value, InvalidInput)


def test_the_key_file_is_created_0600_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "avcc-log.pem"
    created = tree_heads.load_or_create_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert list(path.parent.iterdir()) == [path]  # the temporary file is gone
    again = tree_heads.load_or_create_key(path)
    assert tree_heads.log_id_of(again.public_key()) == tree_heads.log_id_of(created.public_key())
    loaded = tree_heads.load_public_key(tree_heads.public_key_pem(created.public_key()))
    assert tree_heads.log_id_of(loaded) == tree_heads.log_id_of(created.public_key())


def test_a_key_file_that_is_not_an_ed25519_key_is_a_configuration_error(
    tmp_path: Path,
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ConfigurationError, match="not an unencrypted PEM private key"):
        tree_heads.load_or_create_key(garbage)
    ec = tmp_path / "ec.pem"
    ec.write_bytes(
        generate_private_key(SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(ConfigurationError, match="not an Ed25519 key"):
        tree_heads.load_or_create_key(ec)


def test_a_malformed_head_cannot_be_built() -> None:
    with pytest.raises(InvalidInput, match="root hash has 32 bytes"):
        SignedTreeHead("ab" * 32, 1, b"short", 0, bytes(64))
    with pytest.raises(InvalidInput, match="not an unsigned 64-bit integer"):
        SignedTreeHead("ab" * 32, 2**64, bytes(32), 0, bytes(64))
