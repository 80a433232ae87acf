"""Merkle tree maths of avcc's transparency log, exactly as RFC 9162 §2.1 (RFC 6962 §2.1)
defines it: pure functions and an in-memory tree, no I/O.

* hashing: leaf = SHA-256(0x00 || data), node = SHA-256(0x01 || left || right), the root of
  no leaves = SHA-256("") (§2.1.1);
* :class:`MerkleTree` — an append-only tree of leaf hashes that keeps every complete subtree's
  root, so a root, an audit path (§2.1.3.1) or a consistency proof (§2.1.4.1) at any size up
  to the current one costs O(log² n) hashes, not a rebuild from the leaves;
* :func:`verify_inclusion` and :func:`verify_consistency` — the verification algorithms of
  §2.1.3.2 and §2.1.4.2, raising :class:`VerificationError` naming what failed.

Why not ``pymerkle`` (7.0.0, evaluated first): its hashes, roots and audit paths are RFC 9162's
(its inclusion path is ours with the leaf's own hash in front), but its consistency proof is
another proof: it descends to single leaves where RFC 9162 stops at subtree roots (for sizes
6 → 8 it gives four hashes, the RFC three), and its proofs carry "rule" and "subset" bit lists
that its own verifier needs. A receipt or a consistency proof we publish must verify with any
RFC 9162 verifier (transparency-dev/merkle, sigstore), so the algorithms are written here; they
are small, and tests/unit/test_avcc_merkle.py checks them against the RFC 6962 test vectors.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

from aigc_hub.core.errors import InvalidInput

HASH_SIZE = 32
LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"

#: The root hash of the empty tree (RFC 9162 §2.1.1: the hash of an empty string).
EMPTY_ROOT = hashlib.sha256(b"").digest()


class VerificationError(InvalidInput):
    """A proof, signature or receipt does not verify; ``field`` names the part that failed."""


def leaf_hash(data: bytes) -> bytes:
    """The hash of a leaf holding ``data``: SHA-256(0x00 || data)."""
    return hashlib.sha256(LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an interior node: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def _split(width: int) -> int:
    """The size of the left subtree of ``width`` > 1 leaves: the largest power of two < width."""
    return 1 << ((width - 1).bit_length() - 1)


class MerkleTree:
    """An append-only Merkle tree of leaf hashes, answering at every size it has reached.

    ``levels[h][i]`` is the root of the complete subtree of 2**h leaves starting at leaf
    i * 2**h. Appending updates them in amortized O(1), and any range the RFC's recursion asks
    for is a few of them (about 2n hashes kept: some 13 MB for 100k leaves). Not thread-safe;
    never shrinks.
    """

    def __init__(self, leaf_hashes: Iterable[bytes] = ()) -> None:
        self._levels: list[list[bytes]] = [[]]
        self.extend(leaf_hashes)

    @property
    def size(self) -> int:
        """The number of leaves."""
        return len(self._levels[0])

    def append(self, leaf: bytes) -> int:
        """Add a leaf hash; returns its index."""
        if len(leaf) != HASH_SIZE:
            raise InvalidInput("leaf_hash", f"a leaf hash has {HASH_SIZE} bytes, not {len(leaf)}")
        self._levels[0].append(leaf)
        height = 0
        # Each completed pair of complete subtrees completes one a level up.
        while len(self._levels[height]) % 2 == 0:
            level = self._levels[height]
            if height + 1 == len(self._levels):
                self._levels.append([])
            self._levels[height + 1].append(node_hash(level[-2], level[-1]))
            height += 1
        return self.size - 1

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        """Add leaf hashes in order."""
        for leaf in leaf_hashes:
            self.append(leaf)

    def leaf(self, index: int) -> bytes:
        """The hash of leaf ``index``."""
        if not 0 <= index < self.size:
            raise InvalidInput("index", f"leaf {index} is not in a tree of {self.size} leaves")
        return self._levels[0][index]

    def root(self, size: int | None = None) -> bytes:
        """MTH of the first ``size`` leaves (default: all of them)."""
        size = self.size if size is None else size
        self._check_size(size, "size")
        return self._range_root(0, size)

    def inclusion_path(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[size]) of RFC 9162 §2.1.3.1: the audit path, leaf level first."""
        size = self.size if size is None else size
        self._check_size(size, "size")
        if not 0 <= index < size:
            raise InvalidInput("index", f"leaf {index} is not in a tree of {size} leaves")
        path: list[bytes] = []
        start, end = 0, size
        while end - start > 1:
            k = _split(end - start)
            if index < start + k:
                path.append(self._range_root(start + k, end))
                end = start + k
            else:
                path.append(self._range_root(start, start + k))
                start += k
        path.reverse()
        return path

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """PROOF(size1, D[size2]) of RFC 9162 §2.1.4.1; empty when size1 is 0 or size2."""
        size2 = self.size if size2 is None else size2
        self._check_size(size2, "size2")
        if not 0 <= size1 <= size2:
            raise InvalidInput("size1", f"size1 {size1} is not within 0..{size2}")
        if size1 in (0, size2):
            return []
        proof: list[bytes] = []
        m, start, end, whole = size1, 0, size2, True
        # SUBPROOF(m, D[start:end], whole), unrolled: each step adds one sibling root.
        while m != end - start:
            k = _split(end - start)
            if m <= k:
                proof.append(self._range_root(start + k, end))
                end = start + k
            else:
                proof.append(self._range_root(start, start + k))
                start, m, whole = start + k, m - k, False
        if not whole:
            proof.append(self._range_root(start, end))
        proof.reverse()
        return proof

    def _range_root(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) for a range of the RFC's recursion (start is aligned)."""
        width = end - start
        if width == 0:
            return EMPTY_ROOT
        if width & (width - 1) == 0 and start % width == 0:
            return self._levels[width.bit_length() - 1][start // width]
        k = _split(width)
        return node_hash(self._range_root(start, start + k), self._range_root(start + k, end))

    def _check_size(self, size: int, field: str) -> None:
        if not 0 <= size <= self.size:
            raise InvalidInput(field, f"{field} {size} is beyond the tree's {self.size} leaves")


def root_of(leaf_hashes: Iterable[bytes]) -> bytes:
    """MTH of a list of leaf hashes."""
    return MerkleTree(leaf_hashes).root()


def _same(left: bytes, right: bytes) -> bool:
    return hmac.compare_digest(left, right)


def _check_hashes(field: str, hashes: Sequence[bytes]) -> None:
    for position, value in enumerate(hashes):
        if len(value) != HASH_SIZE:
            raise VerificationError(field, f"{field}[{position}] is not a {HASH_SIZE}-byte hash")


def verify_inclusion(
    leaf: bytes, index: int, tree_size: int, path: Sequence[bytes], root: bytes
) -> None:
    """RFC 9162 §2.1.3.2: check that ``leaf`` is leaf ``index`` of the tree of ``tree_size``
    leaves whose root is ``root``; raises :class:`VerificationError` when it is not."""
    _check_hashes("inclusion_path", [leaf, *path])
    if not 0 <= index < tree_size:
        raise VerificationError("leaf_index", f"leaf {index} is not in a tree of {tree_size}")
    fn, sn = index, tree_size - 1
    result = leaf
    for sibling in path:
        if sn == 0:
            raise VerificationError("inclusion_path", "the inclusion path is too long")
        if fn & 1 or fn == sn:
            result = node_hash(sibling, result)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            result = node_hash(result, sibling)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise VerificationError("inclusion_path", "the inclusion path is too short")
    if not _same(result, root):
        raise VerificationError(
            "inclusion_path",
            f"the inclusion path leads to root {result.hex()}, not the head's {root.hex()}",
        )


def verify_consistency(
    size1: int, size2: int, root1: bytes, root2: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 §2.1.4.2: check that the tree of ``size2`` leaves and root ``root2`` extends
    the tree of ``size1`` leaves and root ``root1``; raises :class:`VerificationError`."""
    _check_hashes("consistency_proof", [root1, root2, *proof])
    if not 0 <= size1 <= size2:
        raise VerificationError("size1", f"size {size1} cannot precede size {size2}")
    if size1 == size2 or size1 == 0:
        # Every tree extends the empty one; a tree extends itself only with its own root.
        if proof:
            raise VerificationError("consistency_proof", "the proof must be empty")
        if size1 == size2 and not _same(root1, root2):
            raise VerificationError("consistency_proof", "equal sizes with different roots")
        return
    if not proof:
        raise VerificationError("consistency_proof", "the proof is empty")
    path = list(proof)
    if size1 & (size1 - 1) == 0:
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    first = second = path[0]
    for sibling in path[1:]:
        if sn == 0:
            raise VerificationError("consistency_proof", "the proof is too long")
        if fn & 1 or fn == sn:
            first = node_hash(sibling, first)
            second = node_hash(sibling, second)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            second = node_hash(second, sibling)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise VerificationError("consistency_proof", "the proof is too short")
    if not _same(first, root1):
        raise VerificationError("consistency_proof", f"the proof does not give root {root1.hex()}")
    if not _same(second, root2):
        raise VerificationError("consistency_proof", f"the proof does not give root {root2.hex()}")
