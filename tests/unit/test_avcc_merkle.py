"""avcc's Merkle maths against the RFC 6962 test vectors, and as properties for every tree
of up to 40 leaves.

The vectors (the eight leaf inputs, the roots of sizes 0..8, audit paths and consistency
proofs) are the RFC 6962 reference ones of transparency-dev/merkle (``testonly/constants.go``,
``proof/verify_test.go``), which come from certificate-transparency's ``merkle_tree_test``.
"""

from __future__ import annotations

import hashlib

import pytest

from aigc_hub.core.errors import InvalidInput
from aigc_hub.pipelines.avcc import merkle
from aigc_hub.pipelines.avcc.merkle import MerkleTree, VerificationError

LEAF_INPUTS = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]

ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]

#: (leaf index, tree size) -> audit path
INCLUSION = {
    (0, 1): [],
    (0, 8): [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ],
    (5, 8): [
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ],
    (2, 3): ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
    (1, 5): [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    ],
}

#: (size1, size2) -> consistency proof
CONSISTENCY = {
    (1, 1): [],
    (1, 8): [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ],
    (6, 8): [
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ],
    (2, 5): [
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    ],
}

MAX_SIZE = 40


def hexes(hashes: list[bytes]) -> list[str]:
    return [value.hex() for value in hashes]


def reference_root(leaves: list[bytes]) -> bytes:
    """MTH straight from RFC 9162 §2.1.1's recursive definition, over leaf hashes."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(
        b"\x01" + reference_root(leaves[:k]) + reference_root(leaves[k:])
    ).digest()


def flipped(value: bytes) -> bytes:
    return bytes([value[0] ^ 1]) + value[1:]


@pytest.fixture(scope="module")
def vectors() -> MerkleTree:
    return MerkleTree(merkle.leaf_hash(data) for data in LEAF_INPUTS)


@pytest.fixture(scope="module")
def big() -> MerkleTree:
    return MerkleTree(merkle.leaf_hash(i.to_bytes(2, "big")) for i in range(MAX_SIZE))


def test_leaf_and_node_hashes_carry_the_rfc_domain_prefixes() -> None:
    assert merkle.leaf_hash(b"x") == hashlib.sha256(b"\x00x").digest()
    assert merkle.node_hash(b"l", b"r") == hashlib.sha256(b"\x01lr").digest()
    assert merkle.root_of([]) == hashlib.sha256(b"").digest() == merkle.EMPTY_ROOT


@pytest.mark.parametrize("size", range(9))
def test_the_root_of_the_first_leaves_is_the_rfc_vector(vectors: MerkleTree, size: int) -> None:
    assert vectors.root(size).hex() == ROOTS[size]
    assert merkle.root_of(merkle.leaf_hash(d) for d in LEAF_INPUTS[:size]).hex() == ROOTS[size]


@pytest.mark.parametrize(("index", "size"), list(INCLUSION))
def test_audit_paths_are_the_rfc_vectors_and_verify(
    vectors: MerkleTree, index: int, size: int
) -> None:
    path = vectors.inclusion_path(index, size)
    assert hexes(path) == INCLUSION[index, size]
    leaf = merkle.leaf_hash(LEAF_INPUTS[index])
    merkle.verify_inclusion(leaf, index, size, path, bytes.fromhex(ROOTS[size]))


@pytest.mark.parametrize(("size1", "size2"), list(CONSISTENCY))
def test_consistency_proofs_are_the_rfc_vectors_and_verify(
    vectors: MerkleTree, size1: int, size2: int
) -> None:
    proof = vectors.consistency_proof(size1, size2)
    assert hexes(proof) == CONSISTENCY[size1, size2]
    root1, root2 = bytes.fromhex(ROOTS[size1]), bytes.fromhex(ROOTS[size2])
    merkle.verify_consistency(size1, size2, root1, root2, proof)


def test_roots_at_every_past_size_match_the_rfc_definition(big: MerkleTree) -> None:
    leaves = [big.leaf(i) for i in range(MAX_SIZE)]
    for size in range(MAX_SIZE + 1):
        assert big.root(size) == reference_root(leaves[:size])


def test_every_inclusion_proof_verifies_and_every_tampered_one_fails(big: MerkleTree) -> None:
    for size in range(1, MAX_SIZE + 1):
        root = big.root(size)
        for index in range(size):
            leaf, path = big.leaf(index), big.inclusion_path(index, size)
            merkle.verify_inclusion(leaf, index, size, path, root)
            # (The tree size alone is no tamper: the signed head binds it, not the path.)
            tampered = [
                (flipped(leaf), index, path, root),
                (leaf, index, path, flipped(root)),
                (leaf, index, [*path, leaf], root),
            ]
            if path:
                tampered.append((leaf, index, [flipped(path[0]), *path[1:]], root))
                tampered.append((leaf, index, path[:-1], root))
            if size > 1:
                tampered.append((leaf, (index + 1) % size, path, root))
            for bad_leaf, bad_index, bad_path, bad_root in tampered:
                with pytest.raises(VerificationError):
                    merkle.verify_inclusion(bad_leaf, bad_index, size, bad_path, bad_root)


def test_every_consistency_proof_verifies_and_every_tampered_one_fails(big: MerkleTree) -> None:
    for size2 in range(1, MAX_SIZE + 1):
        root2 = big.root(size2)
        for size1 in range(1, size2 + 1):
            root1, proof = big.root(size1), big.consistency_proof(size1, size2)
            merkle.verify_consistency(size1, size2, root1, root2, proof)
            tampered = [(size1, size2, flipped(root1), root2, proof)]
            if proof:
                tampered.append((size1, size2, root1, root2, [flipped(proof[0]), *proof[1:]]))
                tampered.append((size1, size2, root1, root2, proof[:-1]))
                tampered.append((size1, size2, root1, flipped(root2), proof))
                tampered.append((size1, size2, root1, root2, [*proof, root1]))
            for bad in tampered:
                with pytest.raises(VerificationError):
                    merkle.verify_consistency(*bad)


def test_the_empty_tree_is_consistent_with_every_tree(big: MerkleTree) -> None:
    assert big.consistency_proof(0, 7) == []
    merkle.verify_consistency(0, 7, merkle.EMPTY_ROOT, big.root(7), [])
    with pytest.raises(VerificationError, match="must be empty"):
        merkle.verify_consistency(0, 7, merkle.EMPTY_ROOT, big.root(7), [big.root(7)])


def test_proofs_at_a_past_size_equal_those_of_a_tree_built_to_that_size(big: MerkleTree) -> None:
    small = MerkleTree(big.leaf(i) for i in range(13))
    assert big.inclusion_path(4, 13) == small.inclusion_path(4)
    assert big.consistency_proof(5, 13) == small.consistency_proof(5)


def test_proof_requests_outside_the_tree_are_invalid_input(big: MerkleTree) -> None:
    with pytest.raises(InvalidInput, match="leaf 5 is not in a tree of 5"):
        big.inclusion_path(5, 5)
    with pytest.raises(InvalidInput, match="leaf -1 is not in a tree of 40"):
        big.leaf(-1)
    with pytest.raises(InvalidInput, match="beyond the tree's 40 leaves"):
        big.root(41)
    with pytest.raises(InvalidInput, match=r"size1 9 is not within 0\.\.8"):
        big.consistency_proof(9, 8)
    with pytest.raises(InvalidInput, match="32 bytes"):
        MerkleTree([b"short"])


def test_verifiers_refuse_malformed_input_with_what_is_wrong(big: MerkleTree) -> None:
    root = big.root(4)
    with pytest.raises(VerificationError, match="not a 32-byte hash"):
        merkle.verify_inclusion(big.leaf(0), 0, 4, [b"x"], root)
    with pytest.raises(VerificationError, match="leaf 4 is not in a tree of 4"):
        merkle.verify_inclusion(big.leaf(0), 4, 4, big.inclusion_path(0, 4), root)
    with pytest.raises(VerificationError, match="cannot precede"):
        merkle.verify_consistency(5, 4, root, root, [])
    with pytest.raises(VerificationError, match="equal sizes with different roots"):
        merkle.verify_consistency(4, 4, root, big.root(3), [])
    with pytest.raises(VerificationError, match="the proof is empty"):
        merkle.verify_consistency(3, 4, big.root(3), root, [])
